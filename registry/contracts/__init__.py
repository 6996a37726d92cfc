"""Workload contracts: what must hold before an artifact is promoted (pure; no torch, no I/O beyond reading a manifest)."""
# Each name's module, imported when the name is first asked for: a read that needs one block's rules (the
# speed record's reading needs `SpeedGate`) does not pay for the whole manifest's.
_HOMES = {
    "ContractError": "errors",
    "FidelityBudget": "fidelity",
    "Contract": "manifest",
    "ModelRef": "manifest",
    "Sampling": "manifest",
    "load_manifest": "manifest",
    "ParityPolicy": "parity",
    "Tolerance": "parity",
    "SpeedGate": "speed",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = getattr(__import__(f"{__name__}.{home}", fromlist=[name]), name)  # as `import` does (-X importtime)
    globals()[name] = found
    return found
