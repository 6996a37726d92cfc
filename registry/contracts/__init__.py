"""Workload contracts: what must hold before an artifact is promoted (pure; no torch, no I/O beyond reading a manifest)."""
from registry.contracts.errors import ContractError
from registry.contracts.fidelity import FidelityBudget
from registry.contracts.manifest import Contract, ModelRef, Sampling, load_manifest
from registry.contracts.parity import ParityPolicy, Tolerance
from registry.contracts.speed import SpeedGate

__all__ = [
    "Contract",
    "ContractError",
    "FidelityBudget",
    "ModelRef",
    "ParityPolicy",
    "Sampling",
    "SpeedGate",
    "Tolerance",
    "load_manifest",
]
