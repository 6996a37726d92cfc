"""`registry bench open | record | status`: benchmark sessions from an external harness's own loop."""
from __future__ import annotations

import click

from .output import emit_json, say
from .session import Session, pass_session


@click.group()
def bench() -> None:
    """Benchmark sessions: paired timings recorded in batches, decided as soon as they can be."""


@bench.command("open")
@click.argument("artifact_id")
@click.option("--device", required=True, help="The device the pairs are timed on (e.g. 'NVIDIA H200').")
@click.option("--timer", required=True,
              help="The timer used: cuda_event, perf_counter, interpreter or emulator (as evidence documents name "
                   "it; the last two are recorded but never speed evidence).")
@click.option("--arch", help="The device architecture (e.g. sm90, sm100, cpu): the support matrix places the record by it.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def bench_open(session: Session, artifact_id: str, device: str, timer: str, arch: str | None, as_json: bool) -> None:
    """Open a session for ARTIFACT_ID's current identity, before anything is measured."""
    from registry.app.bench import open_session
    from registry.formats.sequential import fewest_pairs_to_decide

    name, record = open_session(session.open(), artifact_id, device, timer, arch)
    if as_json:
        emit_json({"session": name, "artifact": artifact_id, **record.to_dict()})
    else:
        say(f"session {name} opened for {artifact_id} ({record.pairs} pairs already in its record)")
        say(f"  the record is read after every pair and may decide from pair "
            f"{fewest_pairs_to_decide(record.result.alpha)} (alpha {record.result.alpha:g} per side), up to "
            f"max_pairs {record.max_pairs}; runs_per_arm {record.runs_per_arm} is the size of a complete evidence "
            "document, not of a session (docs/workloads.md)")


def _times(text: str, option: str) -> list[float]:
    from registry.formats.numbers import parse_real

    return [parse_real(part, f"{option} (comma-separated seconds)") for part in text.split(",")]


@bench.command("record")
@click.argument("artifact_id")
@click.argument("session_id")
@click.option("--batch", "batch", required=True, help="The batch's key: a retry under the same key appends nothing.")
@click.option("--baseline", required=True, help="Baseline times in seconds, comma-separated, one per pair.")
@click.option("--candidate", required=True, help="Candidate times in seconds, comma-separated, one per pair.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def bench_record(session: Session, artifact_id: str, session_id: str, batch: str, baseline: str, candidate: str,
                 as_json: bool) -> None:
    """Append one batch of pairs to SESSION_ID of ARTIFACT_ID.

    The same batch again (same key, same pairs) appends nothing and exits 0
    (`appended: false`), like a repeated evidence import; other pairs under a
    recorded key are refused (exit 1).
    """
    from registry.app.bench import record_pairs

    appended, record = record_pairs(session.open(), artifact_id, session_id, _times(baseline, "--baseline"),
                                    _times(candidate, "--candidate"), batch)
    if as_json:
        emit_json({"artifact": artifact_id, "session": session_id, "batch": batch, "appended": appended,
                   **record.to_dict()})
    elif not appended:
        say(f"batch {batch} of session {session_id} is already recorded with these pairs; nothing appended")
    else:
        say(status_text(artifact_id, record))


@bench.command("status")
@click.argument("artifact_id")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_session
def bench_status(session: Session, artifact_id: str, as_json: bool) -> None:
    """Whether ARTIFACT_ID's benchmark record is decided, with its running bounds and the pairs spent."""
    from registry.app.bench import benchmark_record

    record = benchmark_record(session.open(create=False), artifact_id)
    if as_json:
        emit_json({"artifact": artifact_id, **record.to_dict()})
    else:
        say(status_text(artifact_id, record))


def status_text(artifact: str, record) -> str:
    from registry.formats.sequential import fewest_pairs_to_decide

    info = record.to_dict()
    where = (f"at pair {info['decided_at']} of the {info['pairs']} in the record" if info["decided_at"]
             else f"after {info['pairs']} pairs")
    if info["lower"] is None and info["upper"] is None:
        bounds = (f"no bounds yet (the first come at pair {fewest_pairs_to_decide(info['alpha'])}, the fewest that "
                  f"can decide at alpha {info['alpha']:g} per side)")
    else:
        bounds = (f"bounds {_bound(info['lower'])} to {_bound(info['upper'])} (two-sided {info['level']:.0%})")
    head = (f"{artifact}: speed record {info['shows']} {where} ({info['stop']}); {bounds} against the gate "
            f"{info['gate']:.4g}x at alpha {info['alpha']:g} per side; "
            f"{len(info['sessions'])} session{'s' if len(info['sessions']) != 1 else ''}")
    if info["reading"] != "undecided":
        head += f"; {info['pairs_saved']} of max_pairs {info['max_pairs']} saved"
    return head


def _bound(value: float | None) -> str:
    """One running bound; a side still open (no order statistic bounds it yet) is said to be so."""
    return "open" if value is None else f"{value:.4g}x"


COMMANDS = [bench]
