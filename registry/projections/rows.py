"""State <-> read-model rows: canonical JSON text, its sha256, and the indexed columns."""
from __future__ import annotations

from typing import Any

from registry.events.canonical import canonical_json, sha256_hex, strict_json_loads
from registry.formats.errors import first_line

from .schema import ARTIFACTS, BENCH_STREAMS, FRAMESETS, OUTCOMES, SPEED_RECORDS, WORKLOADS
from .verdict_history import without_history
from .state import ProjectionError


def state_text(state: dict[str, Any]) -> str:
    """The canonical JSON of a state: the same bytes as an event payload's."""
    return canonical_json(state)


def _content(state: dict[str, Any]) -> dict[str, Any]:
    text = state_text(state)
    return {"state": text, "row_hash": sha256_hex(text)}


def artifact_row(state: dict[str, Any]) -> dict[str, Any]:
    """The artifact's row: its verdict history lives in its own table (verdict_history.py)."""
    return {
        "artifact": state["artifact"], "workload": state["workload"], "decision": state["decision"],
        "tier": state["tier"], "speedup": state["speedup"], "last_position": state["last_position"],
        "stream_version": state["stream_version"], "identity": state["identity"],
        **_content(without_history(state)),
    }


def workload_row(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "workload": state["workload"], "contract_version": state["contract_version"],
        "last_position": state["last_position"], **_content(state),
    }


def frameset_row(state: dict[str, Any]) -> dict[str, Any]:
    return {"name": state["name"], "position": state["position"], **_content(state)}


def outcomes_row(state: dict[str, Any]) -> dict[str, Any]:
    return {"workload": state["workload"], "last_position": state["last_position"], **_content(state)}


def bench_stream_row(state: dict[str, Any]) -> dict[str, Any]:
    return {"identity": state["identity"], "last_position": state["last_position"], **_content(state)}


def speed_record_row(state: dict[str, Any]) -> dict[str, Any]:
    return {"record": state["record"], "workload": state["workload"], "payload_sha256": state["payload_sha256"],
            "last_position": state["last_position"], **_content(state)}


def record_head(state: dict[str, Any]) -> dict[str, Any]:
    """Where a speed record stands, kept beside its row (`projection_record_heads`, row_checks.py)."""
    return {"record": state["record"], "workload": state["workload"], "last_position": state["last_position"]}


def load_state(text: str) -> dict[str, Any]:
    """A row's state; a row that is not a JSON object is refused in one line (the read models are derived)."""
    try:
        state = strict_json_loads(text)
    except ValueError as exc:
        raise ProjectionError(f"a read-model row is not JSON ({first_line(exc)}); "
                              "`registry replay` rebuilds the read models from the log") from None
    if not isinstance(state, dict):
        raise ProjectionError("a read-model row is not a JSON object; `registry replay` rebuilds the read models "
                              "from the log")
    return state


# (table, key column, state -> row) for each kind of read model, in one place.
MODELS = {
    "artifacts": (ARTIFACTS, "artifact", artifact_row),
    "workloads": (WORKLOADS, "workload", workload_row),
    "framesets": (FRAMESETS, "name", frameset_row),
    "outcomes": (OUTCOMES, "workload", outcomes_row),
    "bench_streams": (BENCH_STREAMS, "identity", bench_stream_row),
    "records": (SPEED_RECORDS, "record", speed_record_row),
}
