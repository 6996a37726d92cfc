"""Commands that decide: promote, approve, revoke, what-if."""
from __future__ import annotations

import sys

import click

from registry.formats.text import one_line

from .session import Session, pass_session
from .output import EXIT_NO, emit_json, exit_status_ahead, say, table



def print_verdict(artifact: str, verdict: dict, contract_version: int | None, benchmark_attempts: int) -> None:
    contract = f"contract v{contract_version}" if contract_version is not None else "no contract"
    say(f"{artifact}: {verdict['decision'].upper()} (tier {verdict['tier'] or '-'}, rule {verdict['rule']}, "
        f"{contract}, {benchmark_attempts} benchmark attempt(s) for this identity)")
    for reason in verdict["reasons"]:
        say(f"  - {one_line(reason)}")
    if verdict["margins"]:
        from registry.projections.headline import margin_rows

        table(None, ["metric", "value", "threshold", "margin", "meets the threshold"], margin_rows(verdict))
    if verdict["speedup"] is not None:
        from registry.projections.report import speedup_text

        say("  " + speedup_text(verdict))
    say(f"  evidence: {', '.join(verdict['evidence_ids']) or 'none'}")


@click.command()
@click.argument("artifact_id")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@pass_session
def promote(session: Session, artifact_id: str, as_json: bool) -> None:
    """Run the gate on ARTIFACT_ID's latest evidence and record the verdict.

    Exit 0 when promoted, 3 for any other verdict, 1 on invalid input.

    Example:

    \b
      registry promote my-kernel
      registry promote my-kernel --json
    """
    from registry.app.decisions import promote as run_promote

    outcome = run_promote(session.open(), artifact_id)
    verdict = outcome.verdict
    promoted = verdict["decision"] == "promoted"
    exit_status_ahead(0 if promoted else EXIT_NO)
    if as_json:
        emit_json({**verdict, "artifact": artifact_id, "appended": outcome.appended,
                   "contract_version": outcome.contract_version, "evidence": verdict["evidence_ids"],
                   "benchmark_attempts": outcome.benchmark_attempts})
    else:
        print_verdict(artifact_id, verdict, outcome.contract_version, outcome.benchmark_attempts)
        if outcome.standing:
            say("  (standing verdict: promoted and rejected are final for this identity)")
    if not promoted:
        sys.exit(EXIT_NO)


def _human(action: str):
    @click.command(action)
    @click.argument("artifact_id")
    @click.option("--reason", required=True, help="Why (required, recorded with your name).")
    @click.option("--verdict", "verdict_event_id", metavar="EVENT_ID",
                  help="The verdict event you are answering (as `show` prints it); default: the latest. "
                       "Refused if it is not the latest when the decision is recorded.")
    @click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
    @pass_session
    def command(session: Session, artifact_id: str, reason: str, verdict_event_id: str | None, as_json: bool) -> None:
        from registry.app.decisions import human_decision

        registry = session.open()
        position = human_decision(registry, artifact_id, action, reason, verdict_event_id)
        if as_json:
            emit_json({"artifact": artifact_id, "action": action, "person": registry.actor, "position": position})
        else:
            say(f"{artifact_id}: {action} recorded by {registry.actor} at position {position}")

    command.help = {
        "approve": "Promote an advisory-tier ARTIFACT_ID by a named person's decision.",
        "revoke": "End ARTIFACT_ID's promotion or rejection; it is held until new evidence and a new verdict.",
    }[action]
    return command


@click.command("what-if")
@click.argument("manifest", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print every artifact's outcome as JSON.")
@pass_session
def what_if(session: Session, manifest: str, as_json: bool) -> None:
    """Decide every artifact of MANIFEST's workload again under it, appending nothing."""
    from registry.app.decisions import what_if as run_what_if
    from registry.contracts import load_manifest

    outcomes = run_what_if(session.open(), load_manifest(manifest))
    if as_json:
        emit_json([outcome.to_dict() for outcome in outcomes])
        return
    changed = [o for o in outcomes if o.changed]
    say(f"{len(changed)} of {len(outcomes)} decisions would change")
    for outcome in outcomes:
        if outcome.contract_note:
            say(f"  {outcome.artifact}: {outcome.contract_note}; under this contract: {outcome.new_decision} "
                f"({outcome.new_rule})")
    table(None, ["artifact", "now", "would be", "rule", "margin that moved"],
          ((o.artifact, o.old_decision, o.new_decision, o.new_rule,
            "; ".join(f"{m['metric']} {m['old_margin'] if m['old_margin'] is None else format(m['old_margin'], '+.4g')}"
                      f" -> {m['new_margin']:+.4g}" for m in o.moved_margins))
           for o in changed))


COMMANDS = [promote, _human("approve"), _human("revoke"), what_if]
