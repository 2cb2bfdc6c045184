"""The one progress bar of the command-line tools and benchmarks (rich): drawn on stderr only when
stderr is a terminal; in a pipe or a log nothing at all, so a script reading stdout or stderr sees
only the result. Rich is imported when a bar is drawn, never for a pipe.

    with progress_bar("put model.bin", total=size, unit="bytes") as bar:
        bar.advance(n)                 # from any thread
        bar.describe("put 3/8 files")  # a new description
"""
from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

Unit = Literal["bytes", "count"]


class Bar:
    """What a caller moves forward; a no-op when nothing is drawn."""

    def __init__(self, progress: Progress | None = None, task: TaskID | None = None) -> None:
        self._progress = progress
        self._task = task
        self._lock = threading.Lock()

    @property
    def drawn(self) -> bool:
        return self._progress is not None

    def advance(self, n: int = 1) -> None:
        if self._progress is not None and self._task is not None:
            with self._lock:
                self._progress.advance(self._task, n)

    def describe(self, description: str) -> None:
        if self._progress is not None and self._task is not None:
            with self._lock:
                self._progress.update(self._task, description=description)


@contextlib.contextmanager
def progress_bar(description: str, total: int, *, unit: Unit = "bytes", transient: bool = False,
                 stream: TextIO | None = None, force: bool = False) -> Iterator[Bar]:
    """A bar of `total` bytes (size, speed, time left) or items (done/total, time left). Not
    transient by default: the finished bar stays as the record of what moved and how fast (as
    curl, pip). `stream`/`force` are for tests (a bar into a buffer)."""
    out = stream or sys.stderr
    if not (force or out.isatty()):
        yield Bar()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )
    columns: list[ProgressColumn] = [TextColumn("{task.description}"), BarColumn()]
    if unit == "bytes":
        columns += [DownloadColumn(binary_units=True), TransferSpeedColumn()]
    else:
        columns.append(MofNCompleteColumn())
    columns.append(TimeRemainingColumn())
    console = Console(file=out, force_terminal=True) if force else Console(file=out)
    with Progress(*columns, console=console, transient=transient) as progress:
        yield Bar(progress, progress.add_task(description, total=total))
