"""Glue between `farm report` / the end of `farm run` and the report library."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from farm.errors import StoreError
from farm.report import render
from farm.report.data import load_run
from farm.report.summary import summary_table
from farm.store.results import ResultStore


def print_and_render(
    uri: str, endpoint: str | None, region: str | None, run_ids: list[str],
    out_dir: str | None = None, console: Console | None = None,
) -> None:
    """Print each run's summary table; with ``out_dir``, also write the full report there."""
    console = console or Console()
    store = ResultStore.open(uri, endpoint, region, create=False)
    for run_id in run_ids:
        if store.read_run_meta(run_id) is None:
            raise StoreError(f"no run {run_id!r} in {uri} (known: {store.list_runs()[:20]})")
    runs = [load_run(store, r) for r in run_ids]
    for run in runs:
        console.print(summary_table(run))
    if out_dir:
        paths = render.build_report(runs, Path(out_dir))
        console.print(f"report written to {paths.markdown.parent}: {paths.markdown.name}, {paths.html.name}, "
                      f"{len(paths.csv)} CSV tables, {len(paths.figures)} plots")
