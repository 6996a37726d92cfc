"""State machines whose whole-log checks run at the end of each example, and after every step in one.

A check that re-reads the whole log, replays it and verifies it after every
one of 15 steps made the lifecycle machine the slowest test of the suite,
while a wrong state stays wrong until the next check sees it: checking when
the example ends finds every state the per-step checks would that no later
step of the example hides again, and one example of each machine still
checks after every step (`checked_after_every_step`), so a state that a later
step would hide is looked at too. (Checks midway as well, as these machines
ran before, cost each of them a third to a half more time and looked at
states the end of the same example looks at anyway.)

Every example of a machine starts from the same registry (`CopiedStart`):
the first example of a process sets it up through the CLI, the others start
from a copy of its folder (a file copy against several CLI commands each).
"""
from __future__ import annotations

import atexit
import copy
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant


class CheckedAtTheEnd(RuleBasedStateMachine):
    """Subclasses put their checks in `whole_checks` and their clean-up in `release`."""

    CHECK_EVERY: int | None = None  # steps between checks (None: none before the end); the last state is checked

    def whole_checks(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        """Remove what the example created (after its last check)."""

    @invariant()
    def checked_when_due(self) -> None:
        self._unchecked = getattr(self, "_unchecked", 0) + 1
        if self.CHECK_EVERY is not None and self._unchecked >= self.CHECK_EVERY:
            self._unchecked = 0
            self.whole_checks()

    def teardown(self) -> None:
        try:
            # The example ended without a failure (a failing step or check is reported as it is): check its last state.
            if getattr(self, "_unchecked", 0) and sys.exc_info()[0] is None:
                self._unchecked = 0
                self.whole_checks()
        finally:
            self.release()


def checked_after_every_step(machine: type[CheckedAtTheEnd], examples: settings):
    """A TestCase running one example of `machine` (as `examples` sets it) with its checks after every step."""
    every_step = type(f"{machine.__name__}EveryStep", (machine,), {"CHECK_EVERY": 1})
    every_step.TestCase.settings = settings(examples, max_examples=1)
    return every_step.TestCase


class CopiedStart:
    """The folder each example of a machine starts from, set up once per process and copied for the others."""

    def __init__(self) -> None:
        self._kept: tuple[Path, dict] | None = None

    def start(self, folder: Path, build: Callable[[], dict]) -> dict:
        """Set `folder` up: by `build()` the first time (it returns what the machine keeps about the folder), else
        as a copy of the folder and of what `build` returned then. SQLite rebuilds a database's WAL index on open,
        so the index files are not copied."""
        skip = shutil.ignore_patterns("*-shm")
        if self._kept is None:
            kept = build()
            template = Path(tempfile.mkdtemp(prefix="machine-start-")) / "start"
            shutil.copytree(folder, template, ignore=skip)
            atexit.register(shutil.rmtree, template.parent, ignore_errors=True)
            self._kept = (template, copy.deepcopy(kept))
            return kept
        template, kept = self._kept
        shutil.copytree(template, folder, dirs_exist_ok=True, ignore=skip)
        return copy.deepcopy(kept)
