"""How long a test waits for something that should happen before calling it hung.

Only a guard against a hang (a dead child, a lost wake-up, a stuck
compiler or browser): no assertion in the suite depends on how fast the
machine is, so the guard is set far above anything a slow machine needs.
"""
HANG_GUARD_S = 1800
