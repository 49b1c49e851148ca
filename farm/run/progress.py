"""Where a run is while it runs: done / in flight / resolved / errors, and where the trials in
flight are (waiting for a start slot, starting, running the agent, grading).

On a terminal this is a rich progress bar with an ETA. Without one (`ray job submit` logs, CI, a
file) a live bar prints nothing until the run ends, so a 20-minute run's log held one line, and
a start that stalled said nothing until it was killed. There, plain lines are printed instead:
one every ``run.progress_interval_s`` and one on every phase change (at most one per poll of
the start gate, farm/run/driver.py), each naming the oldest trial of every phase, how long it
has been there and the step its sandbox's start is in::

    progress +5m10s: 3/12 done (resolved 2, unresolved 1, errors 0, retries 0); queued 4: t3 12 s;
        start 2: regex-log 290 s in podman build; agent 3: fix-git 101 s; grade 0
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

# the gate's phase names (farm/run/starts.py) as the plain line says them
PHASE_LABELS = (("waiting", "queued"), ("starting", "start"), ("running", "agent"), ("grading", "grade"))


class RunProgress:
    def __init__(self, enabled: bool = True, console: Console | None = None, interval_s: float = 30.0) -> None:
        self.enabled = enabled
        self.in_flight = 0
        self.done = 0
        self.total: int | None = None
        self.counts: dict[str, int] = {}
        self.retries = 0
        self.phases: dict[str, Any] = {}  # the run's start gate's last counts (farm/run/starts.py)
        self._progress: Progress | None = None
        self._task: Any = None
        self.console = console
        # plain lines where the output is no terminal (a live bar would print only at the end)
        self.plain = enabled and console is not None and not console.is_terminal
        self.interval_s = interval_s
        self._t0 = time.monotonic()
        self._last_line = 0.0
        self._last_shape: tuple[Any, ...] | None = None

    def __enter__(self) -> RunProgress:
        self._t0 = time.monotonic()
        if self.enabled and not self.plain:
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
        self.total = total
        if self._progress is not None:
            self._progress.update(self._task, total=total)

    def hook(self, event: str, outcome: Any) -> None:
        if event == "stage":  # before the trials: what the run is doing (its preflight)
            if self.plain:
                self._write(f"{outcome}")
            return
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
        if self.plain and event == "phases":
            self._maybe_line()
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

    # --- plain lines ----------------------------------------------------------------------------

    def _shape(self) -> tuple[Any, ...]:
        """What a phase change changes: the counts, and each phase's oldest trial and its step."""
        oldest = self.phases.get("oldest") or {}
        return (self.done, self.retries,
                *(self.phases.get(k, 0) for k, _ in PHASE_LABELS),
                *((o.get("name"), o.get("step")) for o in (oldest.get(k) or {} for k, _ in PHASE_LABELS)))

    def _maybe_line(self) -> None:
        now = time.monotonic()
        shape = self._shape()
        if shape != self._last_shape or now - self._last_line >= self.interval_s:
            self._last_shape, self._last_line = shape, now
            self._write(self.line(now - self._t0))

    def line(self, elapsed_s: float) -> str:
        """The plain progress line (see the module's docstring)."""
        errors = self.counts.get("infra_error", 0) + self.counts.get("model_error", 0)
        total = "?" if self.total is None else str(self.total)
        c = self.counts
        parts = [f"progress +{_duration(elapsed_s)}: {self.done}/{total} done (resolved {c.get('resolved', 0)}, "
                 f"unresolved {c.get('unresolved', 0)}, errors {errors}, retries {self.retries})"]
        oldest = self.phases.get("oldest") or {}
        for key, label in PHASE_LABELS:
            part = f"{label} {self.phases.get(key, 0)}"
            first = oldest.get(key)
            if first:
                part += f": {first['name']} {first['age_s']:.0f} s"
                if first.get("step"):
                    part += f" in {first['step']}"
            parts.append(part)
        return "; ".join(parts)

    def _write(self, text: str) -> None:
        assert self.console is not None
        # not console.print: no markup, no wrapping, and a flush, so that `tail -f` of a file sees
        # the line now (a redirected stdout is block-buffered)
        self.console.file.write(text + "\n")
        self.console.file.flush()


def _duration(s: float) -> str:
    """'45s', '5m10s', '2h03m'."""
    s = int(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
