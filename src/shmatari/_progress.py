"""Progress on stderr for the command lines (``shmatari-bench``,
``shmatari-check``): rich's bars when rich is installed and stderr is a
terminal, else a line each time a bar's note changes (for logs)."""

from __future__ import annotations

import sys


class Progress:
    """Bars on stderr; use as a context manager.

    Args:
        enabled: False shows nothing.
        name: the command's name, which starts each plain line.
    """

    def __init__(self, enabled: bool, name: str):
        self.rich = None
        self.enabled, self.name = enabled, name
        if enabled:
            try:
                from rich.console import Console
                from rich.progress import BarColumn, Progress as Rich, TextColumn, TimeElapsedColumn

                console = Console(stderr=True)
                if console.is_terminal:
                    self.rich = Rich(TextColumn("{task.description:<12}"), BarColumn(),
                                     TextColumn("{task.fields[note]}"),
                                     TimeElapsedColumn(), console=console, transient=True)
            except ImportError:
                pass

    def __enter__(self):
        if self.rich:
            self.rich.__enter__()
        return self

    def __exit__(self, *exc):
        if self.rich:
            self.rich.__exit__(*exc)

    def bar(self, total: float, label: str) -> "Bar":
        """A bar of ``total`` units, described by ``label``."""
        return Bar(self, total, label)


class Bar:
    """Units done out of ``total``: ``update`` sets them, ``finish_one`` adds one."""

    def __init__(self, progress: Progress, total: float, label: str):
        self.progress, self.total, self.done = progress, total, 0
        self.task = None
        self.last = ""
        if progress.rich:
            self.task = progress.rich.add_task(label, total=max(1, total), note="starting")

    def update(self, completed: float, note: str) -> None:
        if self.task is not None:
            self.progress.rich.update(self.task, completed=completed, note=note)
        elif self.progress.enabled and note != self.last:
            self.last = note
            print(f"{self.progress.name}: {note} ...", file=sys.stderr, flush=True)

    def finish_one(self) -> None:
        self.done += 1
        if self.task is not None:
            self.progress.rich.update(self.task, completed=self.done)
