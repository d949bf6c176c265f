"""Stage progress: plain periodic lines when stderr is not a terminal, a rich bar when it is."""

from __future__ import annotations

import io
import subprocess
import sys

from fairmedbench.engine.progress import StageProgress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_non_terminal_prints_a_line_every_tenth_with_rate_and_eta() -> None:
    out, clock = io.StringIO(), Clock()
    with StageProgress(out, tty=False, clock=clock) as step:
        for done in range(0, 101, 5):  # 21 reports, 0.5 s apart
            clock.now = done * 0.1
            step("features litemedsam/synth-contrast train", done, 100)
    lines = out.getvalue().splitlines()
    assert lines[0] == "features litemedsam/synth-contrast train: 0/100"
    assert lines[1:] == [f"features litemedsam/synth-contrast train: {d}/100 (10.0 it/s, "
                         f"{'done in 10s' if d == 100 else f'eta {(100 - d) // 10}s'})" for d in range(10, 101, 10)]


def test_non_terminal_prints_after_ten_seconds_without_a_tenth() -> None:
    out, clock = io.StringIO(), Clock()
    step = StageProgress(out, tty=False, clock=clock)
    step("segmenting", 1, 1000)
    clock.now = 4.0
    step("segmenting", 2, 1000)  # neither 10% nor 10 s: quiet
    clock.now = 11.0
    step("segmenting", 3, 1000)
    # 997 left at 3 / 11 s per item: 3656 s
    assert out.getvalue().splitlines() == ["segmenting: 1/1000", "segmenting: 3/1000 (0.3 it/s, eta 1h00m)"]


def test_quiet_prints_nothing_and_stages_are_separate() -> None:
    out = io.StringIO()
    StageProgress(out, quiet=True, tty=False)("a", 1, 2)
    assert out.getvalue() == ""
    step = StageProgress(out, tty=False, clock=Clock())
    step("a", 1, 2)
    step("b", 1, 2)
    assert out.getvalue().splitlines() == ["a: 1/2", "b: 1/2"]


def test_terminal_draws_a_rich_bar() -> None:
    out = io.StringIO()
    with StageProgress(out, tty=True) as step:
        assert step.bar is not None
        step("features m/d train", 3, 10)
        (task,) = step.bar.tasks
        assert (task.description, task.completed, task.total) == ("features m/d train", 3, 10)
    assert step.bar is None


def test_a_labelled_stage_takes_the_metric_engines_callback() -> None:
    out = io.StringIO()
    with StageProgress(out, tty=True) as progress:
        step = progress.labelled("metrics + bootstrap")
        step(1, 4, "label / sex")
        step(2, 4, "label / age")
        (task,) = progress.bar.tasks
        assert (task.description, task.completed, task.total) == ("label / age", 2, 4)
    plain = io.StringIO()
    StageProgress(plain, tty=False, clock=Clock()).labelled("metrics")(1, 2, "label / sex")
    # a plain line (logs) names what is being resampled now: which label and attribute
    assert plain.getvalue().splitlines() == ["metrics: 1/2: label / sex"]


def test_a_stage_shorter_than_after_s_prints_nothing_and_a_longer_one_starts_printing() -> None:
    out, clock = io.StringIO(), Clock()
    step = StageProgress(out, tty=False, clock=clock, after_s=3.0)
    step("quick", 1, 2)
    clock.now = 2.0
    step("quick", 2, 2)  # done within 3 s: silent
    step("slow", 1, 100)
    clock.now = 5.0  # 3 s into "slow": lines start, then every 10% / 10 s as usual
    step("slow", 2, 100)
    step("slow", 5, 100)
    step("slow", 10, 100)
    assert out.getvalue().splitlines() == ["slow: 2/100 (0.7 it/s, eta 2m27s)", "slow: 10/100 (3.3 it/s, eta 27s)"]


def test_the_module_does_not_import_torch() -> None:
    code = "import sys, fairmedbench.engine.progress; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
