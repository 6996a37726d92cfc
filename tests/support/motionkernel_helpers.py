"""A private copy of the MotionKernel fixture tree, and the import run on it through the CLI."""
from __future__ import annotations

import json
import shutil

import pytest

from paths import MOTIONKERNEL as FIXTURES

@pytest.fixture
def tree(tmp_path):
    """A private copy of the fixture tree (tests add, change and move documents in it)."""
    root = tmp_path / "campaign"
    shutil.copytree(FIXTURES, root)
    return root


def run_import(cli, *paths, check=False):
    result = cli("import", "motionkernel", *map(str, paths), "--json", *(["--check"] if check else []))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result, json.loads(result.stdout)
