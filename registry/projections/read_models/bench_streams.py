"""The bench streams read model: one row per identity's `bench:` stream (`projection_bench_streams`).

A benchmark session's events (`BenchmarkSessionOpened`, `BenchmarkPairsRecorded`)
live in the stream `bench:<identity>` of the artifact identity they measure
(docs/evidence-format.md, "Benchmark sessions"). The row keeps what the
next append checks: the stream's version (what a batch's append expects),
every batch key recorded (session:batch, so a retried batch is known), and
the speed record the stream feeds (speed_records.py sets it when a session
opens; None for an artifact without a payload, which has no record). Pairs
recorded in a stream where no session was opened are refused.
"""
# No `from __future__ import annotations`: TypedDict reads its annotations evaluated.
from typing import Protocol, TypedDict

from sqlalchemy import BigInteger, Column

from registry.formats.names import BENCH_PREFIX

from ..errors import ProjectionError
from ..log import LogEvent
from .declaration import ReadModel, same_subject, state_table

VERSION = 1


class BenchStreamState(TypedDict):
    """One identity's `bench:` stream: the speed record it feeds (None for an artifact without a payload, which
    has none), its version (what the next append expects) and every batch key recorded (session:batch)."""

    identity: str
    record: str | None
    version: int
    batches: list[str]
    last_position: int


class BenchStreams(Protocol):
    """What this model's handlers fold into (RegistryState): the bench streams by identity."""

    bench_streams: dict[str, BenchStreamState]


BENCH_STREAMS = state_table("projection_bench_streams", "identity",
                            Column("last_position", BigInteger, nullable=False))


def stream_event(state: BenchStreams, event: LogEvent) -> BenchStreamState:
    """The identity's stream with `event` counted in it (opened by a session's first event)."""
    identity = event.payload["identity"]
    same_subject(event, BENCH_PREFIX + identity, event.stream)
    stream = state.bench_streams.get(identity)
    if stream is None:
        if event.type != "BenchmarkSessionOpened":
            raise ProjectionError(f"event at position {event.position} ({event.type}) records pairs in "
                                  f"{event.stream}, where no session was opened")
        stream = state.bench_streams[identity] = {"identity": identity, "record": None, "version": 0,
                                                  "batches": [], "last_position": event.position}
    stream["version"] += 1
    stream["last_position"] = event.position
    return stream


def _opened(state: BenchStreams, event: LogEvent) -> None:
    stream_event(state, event)


def _pairs(state: BenchStreams, event: LogEvent) -> None:
    payload = event.payload
    stream_event(state, event)["batches"].append(f"{payload['session']}:{payload['batch']}")


DECLARATION = ReadModel(
    name="bench_streams", version=VERSION, row_type=BenchStreamState, singular="benchmark stream",
    folds={"BenchmarkSessionOpened": _opened, "BenchmarkPairsRecorded": _pairs},
    table=BENCH_STREAMS, key=("identity",),
    stream_prefix=BENCH_PREFIX, logged=True, stream_version="version",
)
