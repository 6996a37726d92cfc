"""`report --json` read the way it was read before speed records were a read model: the peer of scale.py's `report`.

The same report, except that its benchmark records come from one query per
artifact (each artifact's `bench:<identity>` stream read, as the earlier
`record_summary` did for every in-scope artifact, nearly all of them empty)
instead of the speed-record rows read with the rest of the state. Run as a
child process by benchmarks/scale.py, beside `registry report --json`, so the
two are a ratio from one run:

    .venv/bin/python benchmarks/report_before.py sqlite:///registry.db
"""
from __future__ import annotations

import sys

from registry.app import open_registry
from registry.app.reports import build
from registry.projections.report import report_json


def main(url: str) -> None:
    registry = open_registry(url, read_only=False)
    report, state = build(registry, workload=None, position=None, stale_days=30)
    for artifact in state.artifacts.values():  # the earlier reading: a stream query per artifact
        registry.store.read_stream(f"bench:{artifact['identity']}")
    sys.stdout.write(report_json(report))


if __name__ == "__main__":
    main(sys.argv[1])
