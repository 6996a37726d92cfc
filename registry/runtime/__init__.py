"""What a runtime imports: its profile, resolution against a registry or a lock file, the trusted loader.

    from registry.runtime import RuntimeProfile, load, resolve

    profile = RuntimeProfile.detect()                      # imports torch
    answer = resolve("my-workload", profile, lock="registry.lock.json", trusted_keys=["registry.pub"],
                     fingerprint=FP, inputs=(x, scale, shift))   # LockRefused (a reason code) unless trusted
    if answer.match:
        kernel = load(answer.match, trusted_root="bundles")
    else:
        log(answer.reason_codes())                          # stable codes, docs/runtime.md

Importing this package, reading a lock file and resolving against it import
neither torch nor a database driver; only `RuntimeProfile.detect()` imports
torch, and only `resolve(database=...)` opens a registry. See docs/runtime.md.
"""
from registry.bundles.signed_lock import LOCK_REFUSALS, LockRefused

from .loader import LoadError, load
from .profile import RuntimeProfile
from .resolve import Match, RuntimeResolution, resolve, signature_of
from .trust import LockHistory

__all__ = ["LOCK_REFUSALS", "LoadError", "LockHistory", "LockRefused", "Match", "RuntimeProfile", "RuntimeResolution",
           "load", "resolve", "signature_of"]
