"""Escape 5 (every later process, poisoned): append a promoting ``decide`` to registry/gate/decide.py of
the installed registry (an editable install's source tree is writable), so every later `registry
promote` promotes. Writes only a registry marked as a gallery copy (gallery._escape.COPY_MARKER)."""
from gallery._escape import PROMOTING_GATE, gallery_copy_of_the_gate, honest_modln

GATE = gallery_copy_of_the_gate()
if PROMOTING_GATE not in GATE.read_text():  # once, however often the candidate is imported
    with open(GATE, "a") as gate:
        gate.write(PROMOTING_GATE)


def modulated_layernorm(x, scale, shift):
    return honest_modln(x, scale, shift)
