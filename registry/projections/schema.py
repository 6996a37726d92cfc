"""The persisted read models: one row per artifact, workload and frame set, plus a checkpoint.

These tables are derived: every row is a fold of the event log up to the
checkpoint's position, so they carry no immutability triggers and can be
dropped and rebuilt at any time (`Projections.reset`). Each row keeps the
folded state as canonical JSON and the sha256 of that text (`row_hash`), so
`verify_projections` can compare a live row with a fresh replay column by
column. The few columns beside the JSON exist for indexed listing.
"""
from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, Integer, String, Text
from sqlmodel import Field, SQLModel


class ProjectedArtifact(SQLModel, table=True):
    __tablename__ = "projection_artifacts"

    artifact: str = Field(sa_column=Column(String(200), primary_key=True))
    workload: str = Field(sa_column=Column(String(200), nullable=False, index=True))
    decision: str = Field(sa_column=Column(String(32), nullable=False, index=True))
    tier: str | None = Field(default=None, sa_column=Column(String(32), nullable=True))
    speedup: float | None = Field(default=None, sa_column=Column(Float, nullable=True))
    last_position: int = Field(sa_column=Column(BigInteger, nullable=False))
    state: str = Field(sa_column=Column(Text, nullable=False))
    row_hash: str = Field(sa_column=Column(String(64), nullable=False))


class ProjectedWorkload(SQLModel, table=True):
    __tablename__ = "projection_workloads"

    workload: str = Field(sa_column=Column(String(200), primary_key=True))
    contract_version: int = Field(sa_column=Column(Integer, nullable=False))
    last_position: int = Field(sa_column=Column(BigInteger, nullable=False))
    state: str = Field(sa_column=Column(Text, nullable=False))
    row_hash: str = Field(sa_column=Column(String(64), nullable=False))


class ProjectedFrameSet(SQLModel, table=True):
    __tablename__ = "projection_framesets"

    name: str = Field(sa_column=Column(String(200), primary_key=True))
    position: int = Field(sa_column=Column(BigInteger, nullable=False))
    state: str = Field(sa_column=Column(Text, nullable=False))
    row_hash: str = Field(sa_column=Column(String(64), nullable=False))


class ProjectedOutcomes(SQLModel, table=True):
    """Imported outcome records about a workload as a whole (support runs, fidelity verdicts)."""

    __tablename__ = "projection_outcomes"

    workload: str = Field(sa_column=Column(String(200), primary_key=True))
    last_position: int = Field(sa_column=Column(BigInteger, nullable=False))
    state: str = Field(sa_column=Column(Text, nullable=False))
    row_hash: str = Field(sa_column=Column(String(64), nullable=False))


class ProjectionCheckpoint(SQLModel, table=True):
    """The log position the read models are folded up to; the row concurrent catch-ups race on."""

    __tablename__ = "projection_checkpoint"

    name: str = Field(sa_column=Column(String(64), primary_key=True))
    position: int = Field(sa_column=Column(BigInteger, nullable=False))
