"""`registry demo`: the whole campaign on the demo's own registry, judged, reported, shipped and signed.

The campaign itself (candidates, measurements, verdicts) is app/campaign.py;
this is what the command asks of it: check the pair budget, open (or start
afresh) the demo's marked database (app/demo_registry.py), run the campaign,
write the HTML report, check the verdicts against what the demo promises on
this kind of machine, and say what would ship here, with the video
workload's lock signed by the demo's key. Loading from that lock is the
serving side's step (registry.runtime), which the command takes itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from registry.formats.errors import UserError
from registry.formats.output_files import write_output


@dataclass
class DemoOutcome:
    url: str  # the demo's database
    rows: list  # app.campaign.Row, one per candidate
    problems: list[str]  # verdicts not decided as the demo promises on this machine
    near_gate: list[str]
    pairs: dict[str, int]  # timed pairs spent against the fixed design
    report: Path
    shipping: list  # how `resolve` answers for each demo workload here
    signed: dict[str, Any] | None  # the signed lock, or None when nothing ships here


def check_demo_runs(runs: int) -> None:
    """Refuse a pair budget the paired protocol or the confident rule cannot use."""
    from registry.formats.sequential import fewest_pairs_to_decide

    from .campaign import DEMO_ALPHA

    if runs % 2:
        raise UserError(f"--runs {runs} must be even: the paired protocol interleaves BC and CB pairs")
    if runs < fewest_pairs_to_decide(DEMO_ALPHA):
        raise UserError(f"--runs {runs}: the confident speed rule at alpha {DEMO_ALPHA} decides nothing in fewer "
                        f"than {fewest_pairs_to_decide(DEMO_ALPHA)} pairs")


def run_demo(url: str | None, *, actor: str | None, fresh: bool, runs: int, warmup: int, out_dir: str | Path,
             lpips_backbone: str | None, profile, progress_factory: Callable[[str], Any],
             log: Callable[[str], None]) -> DemoOutcome:
    """The demo campaign on the demo's database (`url`, default demo.db), for the machine `profile` describes."""
    import torch

    from registry.projections.html_report import report_html
    from registry.projections.matrix import DEFAULT_STALE_DAYS

    from .campaign import (Campaign, check_expectations, near_gate_notes, pairs_spent, run_campaign, sign_demo_lock,
                           what_would_ship)
    from .demo_registry import open_demo_registry
    from .artifact_page import report_pages
    from .reports import build

    check_demo_runs(runs)
    registry, url = open_demo_registry(url, actor=actor, fresh=fresh)
    with registry:
        out = Path(out_dir)
        rows = run_campaign(Campaign(registry), out, runs=runs, warmup=warmup, lpips_backbone=lpips_backbone,
                            progress_factory=progress_factory, log=log)
        report, state = build(registry, workload=None, position=None, stale_days=DEFAULT_STALE_DAYS)
        pages, more = report_pages(registry, sorted(state.artifacts))
        write_output(out / "report.html", report_html(report, state, pages=pages, pages_left_out=more), force=True)
        return DemoOutcome(url, rows, check_expectations(rows, on_gpu=torch.cuda.is_available()),
                           near_gate_notes(rows), pairs_spent(rows, runs), out / "report.html",
                           what_would_ship(registry, profile), sign_demo_lock(registry, out, profile))
