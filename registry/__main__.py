"""`python -m registry`: the `registry` command, for when the script is not on PATH."""
from registry.cli.main import run

run()
