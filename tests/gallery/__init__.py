"""The cheat gallery: candidate kernels that lie, one module per technique (docs/kernels.md, "Threat model").

Each module exports the op function a CLI user would register as the entry
(``gallery.<module>:<function>``). Most behave honestly on the first call per
shape, which is what the harness before the isolation change checked, and
cheat on the calls it only timed. tests/test_cheat_gallery.py runs each one
through `registry evaluate` and `registry promote`.
"""
