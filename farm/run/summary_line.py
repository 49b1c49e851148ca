"""The one line ``farm run`` prints when it ends: what ran, what was skipped, who answered."""

from __future__ import annotations

from typing import Any


def summary_line(summary: Any) -> str:
    """``summary``: the driver's RunSummary."""
    return (
        f"run [bold]{summary.run_id}[/] (config {summary.config_hash}): {summary.planned} trials planned, "
        f"{summary.skipped} already finished, {summary.executed_attempts} attempts now "
        f"({summary.retried} retries) in {summary.wall_s:.1f}s; store {summary.store_uri}"
        + (f"; {summary.refused} not run (the task cannot run here: see the report)"
           if summary.refused else "")
        + (f"; answered by {_answered(summary.served)}" if summary.served else "")
        + (f"; at most {_peaks(summary.peak_phases)} at once" if summary.peak_phases else "")
        + (f"; {summary.lost} attempts an earlier invocation started and never recorded are now infra_error "
           "attempt_lost" if summary.lost else "")
    )


def _peaks(peak: dict[str, int]) -> str:
    """'2 queued for a start, 2 starting, 6 running, 1 grading': the run's worst start queue and load."""
    return (f"{peak.get('waiting', 0)} queued for a start, {peak.get('starting', 0)} starting, "
            f"{peak.get('running', 0)} running, {peak.get('grading', 0)} grading")


def _answered(served: dict[str, str]) -> str:
    """The model id(s) the preflight saw answer: one, or one per arm when they differ."""
    ids = set(served.values())
    return next(iter(ids)) if len(ids) == 1 else ", ".join(f"{a}={m}" for a, m in served.items())


# -- report ----------------------------------------------------------------------------------
