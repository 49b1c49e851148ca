"""Where a run's time goes, while it goes, without a terminal: the start gate names the oldest
trial of each phase and the step its start is in, and the plain progress line prints it on every
change and at a fixed interval (farm/run/starts.py, farm/run/progress.py)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from farm.run import progress as progress_mod
from farm.run import starts
from farm.run.progress import RunProgress
from farm.run.starts import GateBook


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(starts.time, "monotonic", c)
    monkeypatch.setattr(progress_mod.time, "monotonic", c)
    return c


def test_the_book_names_the_oldest_trial_of_each_phase_and_the_step_its_start_is_in(clock: _Clock) -> None:
    book = GateBook(4)
    book.set_phase("w0", "a1", "starting", "regex-log")
    book.set_step("w0", "a1", "podman build")
    clock.now += 10
    book.set_phase("w1", "a2", "starting", "hello")
    book.set_step("w1", "a2", "agent ping")
    book.set_phase("w1", "a3", "running", "fix-git")
    clock.now += 280
    oldest = book.oldest()
    assert oldest["starting"] == {"name": "regex-log", "age_s": 290.0, "step": "podman build"}
    assert oldest["running"]["name"] == "fix-git" and oldest["running"]["age_s"] == 280.0
    assert "grading" not in oldest and "waiting" not in oldest

    # a phase change restarts the clock and forgets the start's step; the end forgets the trial
    book.set_phase("w0", "a1", "grading")
    assert book.oldest()["grading"] == {"name": "regex-log", "age_s": 0.0, "step": ""}
    assert book.oldest()["starting"]["name"] == "hello"
    assert book.stats()["grading"] == 1
    book.set_phase("w1", "a2", None)
    assert "starting" not in book.oldest()
    # a dead worker's trials leave the lines with it
    book.release_holder("w0")
    assert "grading" not in book.oldest() and book.oldest()["running"]["name"] == "fix-git"


def _phases(starting: int, step: str, running: int = 0) -> dict:
    oldest = {"starting": {"name": "regex-log", "age_s": 290.0, "step": step}} if starting else {}
    return {"waiting": 0, "starting": starting, "running": running, "grading": 0, "oldest": oldest}


def test_without_a_terminal_a_plain_line_comes_on_every_phase_change_and_every_interval(clock: _Clock) -> None:
    out = io.StringIO()
    with RunProgress(console=Console(file=out, force_terminal=False), interval_s=30) as p:
        p.hook("plan", 12)
        p.hook("phases", _phases(1, "podman build"))
        p.hook("phases", _phases(1, "podman build"))  # nothing changed, the interval not over: no line
        clock.now += 5
        p.hook("phases", _phases(1, "agent ping"))  # the start's step changed
        clock.now += 5
        p.hook("phases", _phases(0, "", running=1))  # it started
        clock.now += 31
        p.hook("phases", _phases(0, "", running=1))  # nothing changed, but the interval is over
    lines = out.getvalue().splitlines()
    assert len(lines) == 4, lines
    assert lines[0].startswith("progress +0s: 0/12 done")
    assert "start 1: regex-log 290 s in podman build" in lines[0]
    assert "start 1: regex-log 290 s in agent ping" in lines[1]
    assert "start 0;" in lines[2] and "agent 1" in lines[2]
    assert lines[3].startswith("progress +41s:")


def test_on_a_terminal_the_bar_stays_and_no_plain_lines_are_printed(clock: _Clock) -> None:
    out = io.StringIO()
    with RunProgress(console=Console(file=out, force_terminal=True), interval_s=1) as p:
        p.hook("phases", _phases(1, "podman build"))
        clock.now += 5
        p.hook("phases", _phases(1, "podman build"))
    assert "progress +" not in out.getvalue()


def test_quiet_prints_nothing(clock: _Clock) -> None:
    out = io.StringIO()
    with RunProgress(enabled=False, console=Console(file=out, force_terminal=False), interval_s=1) as p:
        p.hook("stage", "preflight: the endpoint")
        p.hook("phases", _phases(1, "podman build"))
    assert out.getvalue() == ""
