"""The persisted read models: a row per artifact, workload, frame set, workload's imported outcomes,
benchmark-session stream and speed record (a payload within a workload).

Beside them, the verdict history, the payload index and one checkpoint row.

These tables are derived: every row is a fold of the event log up to the
checkpoint's position, so they carry no immutability triggers and can be
dropped and rebuilt at any time (`Projections.reset`). Each row keeps the
folded state as canonical JSON and the sha256 of that text (`row_hash`), so
`verify_projections` can compare a live row with a fresh replay column by
column. The few columns beside the JSON exist for indexed listing.
"""
from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, Integer, String, Table, Text

from registry.events.schema import METADATA

def _read_model(name: str, key: str, *columns: Column) -> Table:
    """A read-model table: its key, the indexed columns, and the folded state with its hash."""
    return Table(
        name, METADATA,
        Column(key, String(200), primary_key=True),
        *columns,
        Column("state", Text, nullable=False),
        Column("row_hash", String(64), nullable=False),
    )


ARTIFACTS = _read_model(
    "projection_artifacts", "artifact",
    Column("workload", String(200), nullable=False, index=True),
    Column("decision", String(32), nullable=False, index=True),
    Column("tier", String(32), nullable=True),
    Column("speedup", Float, nullable=True),
    Column("last_position", BigInteger, nullable=False),
    # What an append and a promotion need without decoding the state: the stream's
    # version at last_position (the expected version of the next append) and the identity.
    Column("stream_version", BigInteger, nullable=False),
    Column("identity", String(64), nullable=False),
)
WORKLOADS = _read_model(
    "projection_workloads", "workload",
    Column("contract_version", Integer, nullable=False),
    Column("last_position", BigInteger, nullable=False),
)
FRAMESETS = _read_model("projection_framesets", "name", Column("position", BigInteger, nullable=False))
# Imported outcome records about a workload as a whole (support runs, fidelity verdicts).
OUTCOMES = _read_model("projection_outcomes", "workload", Column("last_position", BigInteger, nullable=False))

# Benchmark sessions, one row per identity's `bench:` stream: which speed record it feeds, its version
# (what a batch's append expects) and its batch keys.
BENCH_STREAMS = _read_model("projection_bench_streams", "identity", Column("last_position", BigInteger, nullable=False))
# The speed record of one payload within a workload (docs/gate.md, "The speed record"): every session batch and
# every complete benchmark document of those bytes, under any artifact id or claim, in recorded order.
SPEED_RECORDS = Table(
    "projection_speed_records", METADATA,
    Column("record", String(300), primary_key=True),
    Column("workload", String(200), nullable=False, index=True),
    Column("payload_sha256", String(64), nullable=False),
    Column("last_position", BigInteger, nullable=False),
    Column("state", Text, nullable=False),
    Column("row_hash", String(64), nullable=False),
)

# Verdict history, one bounded row per verdict (an artifact row keeps only the current verdict),
# so a promote rewrites one small artifact row and appends one history row, however many came before.
VERDICTS = Table(
    "projection_verdicts", METADATA,
    Column("artifact", String(200), primary_key=True),
    Column("position", BigInteger, primary_key=True),
    Column("event_id", String(36), nullable=False),
    Column("decision", String(32), nullable=False),
    Column("identity", String(64), nullable=True),
    Column("entry", Text, nullable=False),
)

# The payload index: one row per (workload, payload digest, artifact) for every payload an artifact
# registered (current or set-aside identities alike), so the artifacts sharing an artifact's bytes in
# its workload are one indexed range, not a read of every artifact of the workload (app/decisions.py).
PAYLOADS = Table(
    "projection_payloads", METADATA,
    Column("workload", String(200), primary_key=True),
    Column("payload_sha256", String(64), primary_key=True),
    Column("artifact", String(200), primary_key=True),
)

# How many rows of the payload index each (workload, payload digest) has, kept beside it: a read of the
# index compares its range with this count, so rows deleted from the index are a refusal, never a smaller
# attempt count (attempts.py).
PAYLOAD_COUNTS = Table(
    "projection_payload_counts", METADATA,
    Column("workload", String(200), primary_key=True),
    Column("payload_sha256", String(64), primary_key=True),
    Column("artifacts", BigInteger, nullable=False),
)

# How many artifact rows each workload has, kept beside them: a read of a workload's artifacts (resolve, lock,
# rejudge) compares what it found with this count, so a deleted artifact row is a refusal, never an artifact
# that is not there (shipping.py).
WORKLOAD_COUNTS = Table(
    "projection_workload_counts", METADATA,
    Column("workload", String(200), primary_key=True),
    Column("artifacts", BigInteger, nullable=False),
)

# Where each speed record stands (its row's last_position), kept beside the records: a deleted record row, or
# one moved back, is a refusal, never a record with fewer pairs (row_checks.py).
RECORD_HEADS = Table(
    "projection_record_heads", METADATA,
    Column("record", String(300), primary_key=True),
    Column("workload", String(200), nullable=False, index=True),
    Column("last_position", BigInteger, nullable=False),
)

# Every read-model table, which `replay` (and `init`, `db upgrade`) creates again when one is missing.
READ_MODEL_TABLES = ("projection_checkpoint", "projection_artifacts", "projection_verdicts", "projection_payloads",
                     "projection_payload_counts", "projection_workloads", "projection_framesets",
                     "projection_outcomes", "projection_bench_streams", "projection_speed_records",
                     "projection_workload_counts", "projection_record_heads")

# The log position the read models are folded up to; the row concurrent catch-ups race on.
CHECKPOINT = Table(
    "projection_checkpoint", METADATA,
    Column("name", String(64), primary_key=True),
    Column("position", BigInteger, nullable=False),
)
