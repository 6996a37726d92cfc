"""The events table and the idempotency index, as SQLModel tables.

Alembic owns the schema (see registry/migrations); these classes are its
source of truth for autogenerate. Positions are assigned by the store while
it holds the append lock, never by the database, so commit order and
position order are the same thing. The unique (stream, version) index serves
every per-stream read, and an event id carries its position, so a lookup by id
is a primary-key lookup; no other index is written on an ordinary append (the
idempotency-key index is partial: only rows that carry a key are in it).
"""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Column, DateTime, Index, Integer, String, Text, UniqueConstraint, text
from sqlmodel import Field, SQLModel


POSITION_TYPE = BigInteger().with_variant(Integer(), "sqlite")


class EventRow(SQLModel, table=True):
    __tablename__ = "events"
    __table_args__ = (
        UniqueConstraint("stream", "version", name="uq_events_stream_version"),
        # Unique when present: a partial index holds only the rows that carry a key.
        Index("uq_events_idempotency_key", "idempotency_key", unique=True,
              sqlite_where=text("idempotency_key IS NOT NULL"),
              postgresql_where=text("idempotency_key IS NOT NULL")),
    )

    # On SQLite an INTEGER primary key is the rowid itself: one B-tree fewer to write per append.
    position: int = Field(sa_column=Column(POSITION_TYPE, primary_key=True, autoincrement=False))
    # Unique by construction: an event id carries its position (see store.positional_event_id).
    event_id: str = Field(sa_column=Column(String(36), nullable=False))
    stream: str = Field(sa_column=Column(String(200), nullable=False))
    version: int = Field(sa_column=Column(Integer, nullable=False))
    type: str = Field(sa_column=Column(String(64), nullable=False))
    schema_version: int = Field(sa_column=Column(Integer, nullable=False))
    payload: str = Field(sa_column=Column(Text, nullable=False))
    recorded_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    actor: str = Field(sa_column=Column(String(200), nullable=False))
    idempotency_key: str | None = Field(default=None, sa_column=Column(String(200), nullable=True))
    prev_hash: str = Field(sa_column=Column(String(64), nullable=False))
    hash: str = Field(sa_column=Column(String(64), nullable=False))


class IdempotencyRow(SQLModel, table=True):
    """One row per idempotent batch: where it landed and a digest of its content."""

    __tablename__ = "idempotency_keys"

    key: str = Field(sa_column=Column(String(200), primary_key=True))
    stream: str = Field(sa_column=Column(String(200), nullable=False))
    first_position: int = Field(sa_column=Column(BigInteger, nullable=False))
    count: int = Field(sa_column=Column(Integer, nullable=False))
    digest: str = Field(sa_column=Column(String(64), nullable=False))
