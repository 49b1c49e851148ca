"""Glue between `farm report` / the end of `farm run` and the report library."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from farm.errors import StoreError
from farm.report import render
from farm.report.claims import load_claims
from farm.report.data import load_run
from farm.report.official import agreement, agreement_lines, load_official
from farm.report.plots import all_figures
from farm.report.sinks import parse_sinks, send
from farm.report.summary import summary_table
from farm.report.tables import ReportOptions, compute
from farm.store.results import ResultStore


def report_overrides(overrides: list[str]) -> dict[str, str]:
    """The ``report.<key>=value`` items of a command line, as {key: value}: they win over the
    ``report.*`` the run stored at its start."""
    out = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.startswith("report."):
            out[key[len("report."):]] = value
    return out


def print_and_render(
    uri: str, endpoint: str | None, region: str | None, run_ids: list[str],
    out_dir: str | None = None, console: Console | None = None, overrides: dict[str, str] | None = None,
    claims_dir: str | None = None, official: str | None = None,
) -> None:
    """Print each run's summary table; with ``out_dir``, also write the full report there.

    ``overrides`` (``report.*`` keys without the prefix) and ``claims_dir`` win over what the
    first run stored. ``official``: a SWE-bench harness results.json, whose verdicts are set
    beside the first run's (farm/report/official.py), printed and, with ``out_dir``, written as
    official-agreement.csv / .json."""
    console = console or Console()
    store = ResultStore.open(uri, endpoint, region, create=False)
    for run_id in run_ids:
        if store.read_run_meta(run_id) is None:
            raise StoreError(f"no run {run_id!r} in {uri} (known: {store.list_runs()[:20]})")
    runs = [load_run(store, r) for r in run_ids]
    official_verdicts = load_official(official) if official else None  # a bad file fails before any output
    stored = dict(runs[0].config.get("report") or {})
    merged = {**stored, **(overrides or {})}
    if claims_dir:
        merged["claims_dir"] = claims_dir
    options = ReportOptions.from_config({"report": merged})
    sinks = parse_sinks(merged.get("sinks"))  # an unknown sink fails before anything is computed
    claims = Path(merged["claims_dir"]) if merged.get("claims_dir") else None
    registry = load_claims(claims)
    # computed once: the terminal table, the files and every sink show this one content
    content = compute(runs, registry, options)
    for run in runs:
        console.print(summary_table(run, registry, options, content=content))
    figures = all_figures(content) if out_dir or sinks else []
    if out_dir:
        paths = render.write_report(content, Path(out_dir), figures)
        console.print(f"report written to {paths.markdown.parent}: {paths.markdown.name}, {paths.html.name}, "
                      f"{len(paths.csv)} CSV tables, {len(paths.figures)} plots")
    if official_verdicts is not None:
        agreed = agreement(runs[0], official_verdicts)
        for line in agreement_lines(agreed):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        if out_dir:
            console.print(f"official agreement written to {', '.join(str(p) for p in agreed.write(Path(out_dir)))}")
    if sinks:  # the same content and figures the report renders (farm/report/sinks.py)
        for name, where in send(content, figures, sinks).items():
            console.print(f"report sent to {name}: {where}", highlight=False, soft_wrap=True)
