"""A progress bar on stderr for long measurements (silent when stderr is not a terminal).

The label names an artifact from the log, so it is shown literally, never read as rich markup.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[int, int], None]]:
    # rich only once a measurement runs: the commands that import this module also serve quick reads.
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
