"""Where the checkout's folders are, for tests in any folder of tests/ and the helpers beside them."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: tests/support/paths.py
TESTS = ROOT / "tests"
SUPPORT = TESTS / "support"
FIXTURES = TESTS / "fixtures"
GALLERY = TESTS / "gallery"
DOCS = ROOT / "docs"
# A candidate file several tests register by its path (kernels that raise, forge or stall, written as candidates).
KERNEL_FIXTURES = SUPPORT / "kernel_fixtures.py"
MOTIONKERNEL = FIXTURES / "motionkernel"
