"""The catalogue (names and versions, no pydantic) and the payload models say the same thing.

The read path folds events by the catalogue's names and versions alone; an
event type or version the catalogue missed would send every such event down
the slow, validated upcasting path, and an evidence kind it missed would not
be folded as evidence.
"""
from __future__ import annotations

from typing import get_args

from registry.events.catalogue import EVIDENCE_TYPE_BY_KIND, SCHEMA_VERSIONS
from registry.events.types import EVIDENCE_EVENT_BY_KIND, PAYLOAD_TYPES, ArtifactRegistered
from registry.formats.kinds import ARTIFACT_KINDS


def test_every_payload_type_at_its_schema_version():
    assert SCHEMA_VERSIONS == {name: model.schema_version for name, model in PAYLOAD_TYPES.items()}


def test_every_evidence_kind_and_its_event_type():
    assert EVIDENCE_TYPE_BY_KIND == {kind: model.type for kind, model in EVIDENCE_EVENT_BY_KIND.items()}


def test_the_artifact_kinds_a_registration_accepts():
    assert get_args(ArtifactRegistered.model_fields["kind"].annotation) == ARTIFACT_KINDS
