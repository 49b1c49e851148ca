"""Glue between `farm report` / the end of `farm run` and the report library."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from farm.store.results import ResultStore


def _fallback_table(store: ResultStore, run_id: str) -> Table:
    """Resolve rate per benchmark/arm and the count per error class (plan = denominator)."""
    plan = store.read_plan(run_id).to_pylist()
    trials = {r["trial_key"]: r for r in store.read_trials(run_id).to_pylist()}
    groups: dict[tuple[str, str], dict[str, int]] = {}
    for p in plan:
        g = groups.setdefault((p["benchmark"], p["arm"]), {})
        status = trials.get(p["trial_key"], {}).get("status", "missing")
        g[status] = g.get(status, 0) + 1
        g["planned"] = g.get("planned", 0) + 1
    table = Table(title=f"run {run_id}")
    for col in ("benchmark", "arm", "resolved", "rate", "unresolved", "model_error", "infra_error", "missing"):
        table.add_column(col)
    for (bench, arm), g in sorted(groups.items()):
        n = g["planned"]
        table.add_row(bench, arm, str(g.get("resolved", 0)), f"{100.0 * g.get('resolved', 0) / n:.1f}%",
                      str(g.get("unresolved", 0)), str(g.get("model_error", 0)),
                      str(g.get("infra_error", 0)), str(g.get("missing", 0)))
    return table


def print_and_render(
    uri: str, endpoint: str | None, region: str | None, run_ids: list[str],
    out_dir: str | None = None, console: Console | None = None,
) -> None:
    console = console or Console()
    store = ResultStore.open(uri, endpoint, region, create=False)
    for run_id in run_ids:
        if store.read_run_meta(run_id) is None:
            from farm.errors import StoreError

            raise StoreError(f"no run {run_id!r} in {uri} (known: {store.list_runs()[:20]})")
    try:
        from farm.report import render, summary  # the full report library
    except ImportError:
        render = summary = None  # type: ignore[assignment]
    if summary is None or render is None:
        for run_id in run_ids:
            console.print(_fallback_table(store, run_id))
        return
    from farm.report.data import load_run

    runs = [load_run(store, r) for r in run_ids]
    for run in runs:
        console.print(summary.summary_table(run))
    if out_dir:
        paths = render.build_report(runs, Path(out_dir))
        console.print(f"report written: {paths}")
