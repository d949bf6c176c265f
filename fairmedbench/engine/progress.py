"""Progress of named stages reported as (stage, done, total): a rich bar on a terminal, plain periodic lines
otherwise (logs, CI), so that no long step runs in silence; the one progress display of the package. torch-free."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress


@dataclass
class _Stage:
    start: float
    last_line: float
    last_done: int
    task: Any = None


class StageProgress:
    """Callable `(stage, done, total)`, used as a context manager that starts and stops the display.

    On a terminal: one rich progress bar per stage. Otherwise: a line when a stage starts, then whenever it
    has advanced another `every_fraction` of its total or `every_s` seconds have passed, and when it ends:
    "features litemedsam/synth-contrast train: 40/100 (12.3 it/s, eta 5s)"; with `after_s`, a stage shorter than
    that prints nothing (the lines start once it has run `after_s` seconds). `quiet` shows nothing.
    """

    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False, tty: bool | None = None,
                 every_s: float = 10.0, every_fraction: float = 0.1, unit: str = "it", after_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.quiet = quiet
        self.tty = self.stream.isatty() if tty is None else tty
        self.every_s, self.every_fraction, self.unit, self.clock = every_s, every_fraction, unit, clock
        self.after_s = after_s
        self.stages: dict[str, _Stage] = {}
        self.bar: Progress | None = None

    def __enter__(self) -> StageProgress:
        if not self.quiet and self.tty:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TimeRemainingColumn(),
                                console=Console(file=self.stream), transient=True)
            self.bar.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def __call__(self, stage: str, done: int, total: int, detail: str = "") -> None:
        """Report `done` of `total` for `stage`; a plain line ends with `detail` (what is being done now)."""
        if self.quiet:
            return
        now = self.clock()
        state = self.stages.get(stage)
        if state is None or done < state.last_done:  # a new stage, or the same name starting over
            state = self.stages[stage] = _Stage(now, float("-inf"), 0)
            if self.bar is not None:
                state.task = self.bar.add_task(stage, total=total)
        if self.bar is not None:
            self.bar.update(state.task, completed=done, total=total)
            state.last_done = done
            return
        if now - state.start < self.after_s:  # a short stage stays silent
            state.last_done = done
            return
        step = max(1, int(total * self.every_fraction)) if total > 0 else 1
        due = (done >= total or done // step > state.last_done // step or now - state.last_line >= self.every_s
               or state.last_line == float("-inf"))
        state.last_done = done
        if due:
            state.last_line = now
            line = self.line(stage, done, total, now - state.start)
            print(f"{line}: {detail}" if detail else line, file=self.stream, flush=True)

    def labelled(self, stage: str) -> Callable[[int, int, str], None]:
        """A `(done, total, label)` callback (the metric engine's `on_step`) reported as one stage; a bar shows
        the latest label as its description, a plain line ends with it."""

        def step(done: int, total: int, label: str) -> None:
            self(stage, done, total, label)
            if self.bar is not None:
                self.bar.update(self.stages[stage].task, description=label)

        return step

    def line(self, stage: str, done: int, total: int, elapsed: float) -> str:
        """The plain-text report of one stage."""
        if done <= 0 or elapsed <= 0:
            return f"{stage}: {done}/{total}"
        rate = done / elapsed
        tail = f"done in {_duration(elapsed)}" if done >= total else f"eta {_duration((total - done) / rate)}"
        return f"{stage}: {done}/{total} ({rate:.1f} {self.unit}/s, {tail})"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"
