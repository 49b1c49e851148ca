"""`farm plan` output: the forecast as a table (rich) or as one JSON document."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from farm.forecast.model import Forecast, Outcome


def _h(hours: float) -> str:
    if math.isnan(hours):
        return "–"
    s = hours * 3600
    return f"{s:.1f} s" if s < 120 else f"{hours * 60:.1f} min" if hours < 2 else f"{hours:.1f} h"


def _share(x: float) -> str:
    return "–" if math.isnan(x) else f"{100 * x:.0f}% busy"


def _money(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


def _row(o: Outcome) -> list[str]:
    return [str(o.seeds), str(o.max_in_flight), str(o.trials), _h(o.wall_h), f"{o.gpu_hours:,.1f}",
            f"{o.pod_hours:,.1f}", f"{(o.prompt_tokens + o.completion_tokens) / 1e6:,.1f}", _money(o.cost["total"])]


HEAD = ["seeds", "max_in_flight", "trials", "wall time", "GPU-h", "pod-h", "Mtok (prompt incl. cached + completion)",
        "cost"]


def print_forecast(fc: Forecast, console: Console) -> None:
    b = fc.base
    src = f"pilot run {fc.pilot}" if fc.pilot else "stated workload (no pilot)"
    tasks = ", ".join(f"{bench} {n}" for bench, n in fc.assumptions.get("tasks", {}).items())
    console.print(f"[bold]farm plan[/] from {src}: {b.trials} trials, {b.seeds} seeds, max_in_flight "
                  f"{b.max_in_flight}; tasks per benchmark: {tasks}", highlight=False, soft_wrap=True)
    t = Table(show_header=False)
    t.add_column("what")
    t.add_column("forecast")
    uncached = b.prompt_tokens - b.cached_tokens
    for name, value in [
        ("wall time", _h(b.wall_h)),
        ("GPU-hours (reserved; busy share)", f"{b.gpu_hours:,.1f} ({_share(b.gpu_busy_share)})"),
        ("pod-hours (held by trials; slots reserved)", f"{b.pod_hours:,.1f}; {b.slot_hours:,.1f}"),
        ("trials in flight (mean)", f"{b.mean_in_flight:,.1f}"),
        ("LLM time per call / unloaded", "–" if math.isnan(b.llm_slowdown) else f"{b.llm_slowdown:.2f}×"),
        ("tokens: uncached prompt / cached / completion (M)",
         f"{uncached / 1e6:,.1f} / {b.cached_tokens / 1e6:,.1f} / {b.completion_tokens / 1e6:,.1f}"),
        ("cost: GPU / pods / tokens / total", " / ".join(_money(b.cost[k]) for k in ("gpu", "pods", "tokens",
                                                                                       "total"))),
        ("bottleneck", fc.bottleneck),
    ]:
        t.add_row(name, value)
    console.print(t)
    if fc.gains:
        console.print("wall time with one resource doubled: "
                      + ", ".join(f"{k} {-100 * v:+.0f}%" for k, v in fc.gains.items()),
                      highlight=False, soft_wrap=True)
    by_seeds = sorted([b, *fc.by_seeds], key=lambda o: o.seeds) if fc.by_seeds else []
    by_mif = sorted([b, *fc.by_max_in_flight], key=lambda o: o.max_in_flight) if fc.by_max_in_flight else []
    for title, outs in (("sensitivity to seeds", by_seeds), ("sensitivity to max_in_flight", by_mif)):
        if not outs:
            continue
        s = Table(title=title)
        for h in HEAD:
            s.add_column(h)
        for o in outs:
            s.add_row(*_row(o))
        console.print(s)
    console.print(order_line(fc), highlight=False, soft_wrap=True)
    for note in fc.assumptions.get("notes") or []:
        console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)


def _expected(t: dict[str, Any]) -> str:
    return "no prior" if t["expected_s"] is None else _h(t["expected_s"] / 3600.0)


def order_line(fc: Forecast) -> str:
    """The start order simulated, the tasks longest_first starts first, and the other order's wall time."""
    head = ", ".join(f"{t['task_id']} ({_expected(t)})" for t in fc.longest)
    how = "longest expected first" if fc.order == "longest_first" else "the benchmark's order"
    line = f"start order: run.order={fc.order} ({how}); longest expected tasks: {head or '–'}"
    return line + f"; run.order={fc.other_order} would take {_h(fc.other_order_wall_h)}"


def forecast_json(fc: Forecast) -> dict[str, Any]:
    return fc.to_json()
