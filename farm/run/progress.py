"""A rich progress bar for runs: done / in flight / resolved / errors, with an ETA, and where the
trials in flight are (waiting for a start slot, starting, running the agent, grading)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class RunProgress:
    def __init__(self, enabled: bool = True, console: Console | None = None) -> None:
        self.enabled = enabled
        self.in_flight = 0
        self.done = 0
        self.counts: dict[str, int] = {}
        self.retries = 0
        self.phases: dict[str, int] = {}  # the run's start gate's last counts (farm/run/starts.py)
        self._progress: Progress | None = None
        self._task: Any = None
        self.console = console

    def __enter__(self) -> RunProgress:
        if self.enabled:
            self._progress = Progress(
                TextColumn("[bold]trials"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                console=self.console, transient=False,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task("run", total=None, detail="starting")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def set_total(self, total: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, total=total)

    def hook(self, event: str, outcome: Any) -> None:
        if event == "plan":
            self.set_total(outcome)
            return
        if event == "phases":
            self.phases = dict(outcome)
        if event == "start":
            self.in_flight += 1
        elif event in ("done", "retry"):
            self.in_flight -= 1
            if event == "retry":
                self.retries += 1
            else:
                self.done += 1
                status = outcome.result.status
                self.counts[status] = self.counts.get(status, 0) + 1
        if self._progress is not None:
            errors = self.counts.get("infra_error", 0) + self.counts.get("model_error", 0)
            detail = (f"in flight {self.in_flight} | resolved {self.counts.get('resolved', 0)} | "
                      f"unresolved {self.counts.get('unresolved', 0)} | errors {errors} | retries {self.retries}")
            self._progress.update(self._task, completed=self.done, detail=detail + self.phase_detail())

    def phase_detail(self) -> str:
        """' (queued 3, starting 2, running 5, grading 1)': where the trials in flight are."""
        if not self.phases:
            return ""
        p = self.phases
        return (f" (queued {p.get('waiting', 0)}, starting {p.get('starting', 0)}, "
                f"running {p.get('running', 0)}, grading {p.get('grading', 0)})")
