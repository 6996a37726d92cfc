"""`registry monitor record | status | ack`: a promoted artifact's re-measurements and its regression alarm."""
from __future__ import annotations

import click

from registry.formats.text import one_line

from .bench_commands import _times
from .output import emit_json, say
from .session import Session, pass_session


@click.group()
def monitor() -> None:
    """Watch a promoted artifact's re-measured speed for a regression (docs/monitor.md)."""


def _software(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    found: dict[str, str] = {}
    for value in values:
        name, sep, version = value.partition("=")
        if not sep or not name or name in found:
            raise click.BadParameter(f"expected NAME=VERSION once per name, got {value!r}", param_hint="--software")
        found[name] = version
    return found


@monitor.command("record")
@click.argument("artifact_id")
@click.option("--batch", required=True, help="The batch's key: a retry under the same key appends nothing.")
@click.option("--baseline", required=True, help="Baseline times in seconds, comma-separated, one per pair.")
@click.option("--candidate", required=True, help="Candidate times in seconds, comma-separated, one per pair.")
@click.option("--device", required=True, help="The device the pairs were timed on (e.g. 'NVIDIA H200').")
@click.option("--software", multiple=True, required=True, callback=_software, metavar="NAME=VERSION",
              help="A component of the software profile the pairs were timed under (repeat: torch=2.5.1, ...).")
@click.option("--baseline-waited", help="Seconds each baseline run waited for a CPU, as the harness saw it, "
                                        "comma-separated, one per pair ('-': unreported).")
@click.option("--json", "as_json", is_flag=True, help="Print the monitor as JSON.")
@pass_session
def monitor_record(session: Session, artifact_id: str, batch: str, baseline: str, candidate: str, device: str,
                   software: dict[str, str], baseline_waited: str | None, as_json: bool) -> None:
    """Append one batch of re-measured pairs of promoted ARTIFACT_ID; an alarm is appended when the detector crosses."""
    from registry.app.monitor import record_remeasurement

    appended, summary = record_remeasurement(session.open(), artifact_id, _times(baseline, "--baseline"),
                                             _times(candidate, "--candidate"), batch=batch, device=device,
                                             software=software, baseline_waited=_waits(baseline_waited))
    if not appended and not as_json:
        say(f"batch {batch} was already recorded; nothing appended")
    _print(artifact_id, summary, as_json, batch=batch, appended=appended)


def _waits(text: str | None) -> list[float | None] | None:
    if text is None:
        return None
    from registry.formats.numbers import parse_real

    return [None if part == "-" else parse_real(part, "--baseline-waited (comma-separated seconds, or -)")
            for part in text.split(",")]


@monitor.command("status")
@click.argument("artifact_id")
@click.option("--json", "as_json", is_flag=True, help="Print the monitor as JSON.")
@pass_session
def monitor_status(session: Session, artifact_id: str, as_json: bool) -> None:
    """ARTIFACT_ID's monitor: pairs, the statistic against its alarm level, the alarm and its acknowledgment."""
    from registry.app.monitor import monitor_status as status

    _print(artifact_id, status(session.open(create=False), artifact_id), as_json)


@monitor.command("ack")
@click.argument("artifact_id")
@click.argument("alarm_event_id")
@click.option("--reason", required=True, help="Why (required, recorded with your name).")
@click.option("--json", "as_json", is_flag=True, help="Print the monitor as JSON.")
@pass_session
def monitor_ack(session: Session, artifact_id: str, alarm_event_id: str, reason: str, as_json: bool) -> None:
    """Acknowledge ALARM_EVENT_ID of ARTIFACT_ID: a known regression, no longer an alert (it still does not ship)."""
    from registry.app.monitor import acknowledge

    _print(artifact_id, acknowledge(session.open(), artifact_id, alarm_event_id, reason=reason), as_json)


def _print(artifact_id: str, summary: dict | None, as_json: bool, **extra) -> None:
    """The monitor as JSON (with `extra` beside it), or as the lines `artifact_text` writes."""
    if as_json:
        emit_json({"artifact": artifact_id, **extra, "monitor": summary})
    else:
        say(artifact_text(artifact_id, summary))


def artifact_text(artifact: str, summary: dict | None) -> str:
    if summary is None:
        return f"{artifact}: no re-measurement recorded; the monitor has not started"
    return f"{artifact}: {monitor_text(summary)}"


def monitor_text(summary: dict) -> str:
    """The monitor in a line or a few: its status, the statistic against its level, the alarm, the acknowledgment."""
    text = (f"monitor {summary['status']} ({summary['pairs']} pairs, {summary['below']} below "
            f"{summary['threshold']:.4g}; log statistic {summary['log_statistic']:.3f} of "
            f"{summary['log_alarm_level']:.3f}; ARL >= {summary['arl_at_least']:g} pairs)")
    if summary["baseline_wait_share"] is not None:
        text += (f"\n  {summary['left_out']} pairs left out (baseline waited over "
                 f"{summary['baseline_wait_share']:g} of its time), {summary['contended_batches']} contended batches")
    if summary["alarm"]:
        text += f"\n  alarm {summary['alarm']['event_id']} at pair {summary['crossed_at']}"
    elif summary["crossed_at"] is not None:
        text += f"\n  crossed at pair {summary['crossed_at']}; its alarm is not yet recorded"
    if summary["acknowledged"]:
        ack = summary["acknowledged"]
        text += f"\n  acknowledged by {ack['person']}: {one_line(ack['reason'])}"
    return text


COMMANDS = [monitor]
