"""The names of the log's vocabulary, without the models: event types, schema versions, kinds.

Reading state that is already projected needs only these names; validating a
payload needs the pydantic models in `types`, whose import costs a read
command a good part of its start-up. So the names live here, `types` builds
its models on them, and a test holds the two to the same types and versions.
"""
from __future__ import annotations

# Evidence kind (as in an evidence document's items) -> the event type that records it.
EVIDENCE_TYPE_BY_KIND = {
    "parity": "ParityMeasured",
    "benchmark": "BenchmarkMeasured",
    "execution": "ExecutionObserved",
    "perceptual": "PerceptualMeasured",
}
EVIDENCE_KIND_BY_TYPE = {event_type: kind for kind, event_type in EVIDENCE_TYPE_BY_KIND.items()}

# Every event type -> the payload schema version this registry writes and reads.
SCHEMA_VERSIONS = {
    "WorkloadDeclared": 1,
    "FrameSetRegistered": 1,
    "ArtifactRegistered": 1,
    "ParityMeasured": 1,
    "BenchmarkMeasured": 1,
    "ExecutionObserved": 1,
    "PerceptualMeasured": 1,
    "EvaluationFailed": 1,
    "VerdictRendered": 1,
    "HumanDecision": 1,
    "ExternalOutcome": 1,
    "BenchmarkSessionOpened": 1,
    "BenchmarkPairsRecorded": 1,
    "TokenIssued": 1,
    "TokenRevoked": 1,
    "PairsRemeasured": 1,
    "RegressionDetected": 1,
    "RegressionAcknowledged": 1,
    "HookAdded": 1,
    "HookRemoved": 1,
    "HookDeliveryAttempted": 1,
}
