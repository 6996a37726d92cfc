"""The persisted read models: one row per artifact, workload and frame set, plus a checkpoint.

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

ARTIFACTS = Table(
    "projection_artifacts", METADATA,
    Column("artifact", String(200), primary_key=True),
    Column("workload", String(200), nullable=False, index=True),
    Column("decision", String(32), nullable=False, index=True),
    Column("tier", String(32), nullable=True),
    Column("speedup", Float, nullable=True),
    Column("last_position", BigInteger, nullable=False),
    Column("state", Text, nullable=False),
    Column("row_hash", String(64), nullable=False),
)

WORKLOADS = Table(
    "projection_workloads", METADATA,
    Column("workload", String(200), primary_key=True),
    Column("contract_version", Integer, nullable=False),
    Column("last_position", BigInteger, nullable=False),
    Column("state", Text, nullable=False),
    Column("row_hash", String(64), nullable=False),
)

FRAMESETS = Table(
    "projection_framesets", METADATA,
    Column("name", String(200), primary_key=True),
    Column("position", BigInteger, nullable=False),
    Column("state", Text, nullable=False),
    Column("row_hash", String(64), nullable=False),
)

# Imported outcome records about a workload as a whole (support runs, fidelity verdicts).
OUTCOMES = Table(
    "projection_outcomes", METADATA,
    Column("workload", String(200), primary_key=True),
    Column("last_position", BigInteger, nullable=False),
    Column("state", Text, nullable=False),
    Column("row_hash", String(64), nullable=False),
)

# The log position the read models are folded up to; the row concurrent catch-ups race on.
CHECKPOINT = Table(
    "projection_checkpoint", METADATA,
    Column("name", String(64), primary_key=True),
    Column("position", BigInteger, nullable=False),
)
