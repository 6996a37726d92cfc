"""The events table and the idempotency index, as SQLAlchemy Core tables.

Alembic owns the schema (see registry/migrations); these tables are its
source of truth for autogenerate (through `complete_metadata`). Positions are
assigned by the store while it holds the append lock, never by the database,
so commit order and position order are the same thing. The unique (stream, version) index serves
every per-stream read, and an event id carries its position, so a lookup by id
is a primary-key lookup; no other index is written on an ordinary append (the
idempotency-key index is partial: only rows that carry a key are in it).
"""
from __future__ import annotations

from functools import cache

from sqlalchemy import BigInteger, Column, DateTime, Index, Integer, MetaData, String, Table, Text, UniqueConstraint, text

# Every table of the registry, the log's and the read models' (each declared in registry/projections/read_models/).
# Plain Core tables: the store never maps rows to objects. Alembic compares complete_metadata().
METADATA = MetaData()

POSITION_TYPE = BigInteger().with_variant(Integer(), "sqlite")

EVENTS = Table(
    "events", METADATA,
    # On SQLite an INTEGER primary key is the rowid itself: one B-tree fewer to write per append.
    Column("position", POSITION_TYPE, primary_key=True, autoincrement=False),
    # Unique by construction: an event id carries its position (see ids.positional_event_id).
    Column("event_id", String(36), nullable=False),
    Column("stream", String(200), nullable=False),
    Column("version", Integer, nullable=False),
    Column("type", String(64), nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("payload", Text, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    Column("actor", String(200), nullable=False),
    Column("idempotency_key", String(200), nullable=True),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
    UniqueConstraint("stream", "version", name="uq_events_stream_version"),
)

# One row per idempotent batch: where it landed and a digest of its content.
IDEMPOTENCY_KEYS = Table(
    "idempotency_keys", METADATA,
    Column("key", String(200), primary_key=True),
    Column("stream", String(200), nullable=False),
    Column("first_position", BigInteger, nullable=False),
    Column("count", Integer, nullable=False),
    Column("digest", String(64), nullable=False),
)


@cache
def complete_metadata() -> MetaData:
    """METADATA with the one declaration only schema comparison reads: the idempotency-key index.

    Unique when present: a partial index holds only the rows that carry a key.
    It is declared here, once, rather than with the table, because its
    per-dialect predicates import SQLAlchemy's Postgres dialect, a sixth of a
    read command's start-up; the migrations create it, and nothing else uses it.
    """
    Index("uq_events_idempotency_key", EVENTS.c.idempotency_key, unique=True,
          sqlite_where=text("idempotency_key IS NOT NULL"),
          postgresql_where=text("idempotency_key IS NOT NULL"))
    return METADATA
