"""Terminal summary of one run: resolve rate per benchmark/arm and outcomes per class."""

from __future__ import annotations

import math

from rich.markup import escape
from rich.table import Table

from farm.report.caveats import image_caveats
from farm.report.data import RunData, not_run, outcome_groups
from farm.report.stats import avg_at_k, pooled_rate


def _pct(v: float) -> str:
    return "–" if math.isnan(v) else f"{v:.1f}"


def _model_cell(model: str, served_by: str) -> str:
    """The group's model with what answered it when that says more (``frognano-4b (leaf ·
    frognano-4b)``); one cell, so provenance costs the terminal table no column."""
    return model if served_by in ("–", model) else f"{model} ({served_by})"


def summary_table(run: RunData) -> Table:
    """A rich table (no bootstrap, so it is instant): Avg@k over all scheduled trials, the
    graded-only rate, and counts per outcome class with infra errors and missing trials apart."""
    table = Table(title=f"run {run.run_id} · config {run.config_hash[:12]}")
    for col, just in (
        ("benchmark", "left"), ("arm", "left"), ("model", "left"), ("tasks×k", "right"),
        ("Avg@k %", "right"), ("graded %", "right"), ("resolved", "right"),
        ("unresolved", "right"), ("model_error", "right"), ("infra_error", "right"),
        ("missing", "right"), ("error classes", "left"), ("not run", "left"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for g in outcome_groups(run):
        ok = g.resolved
        classes: dict[str, int] = {}
        for t in g.trials:
            if t["status"] in ("model_error", "infra_error") or t.get("error_class"):
                name = f"{t['status']}:{t.get('error_class') or '-'}"
                classes[name] = classes.get(name, 0) + 1
        infra, missing = g.count("infra_error"), g.count("missing")
        refused = ", ".join(f"{nr.reason}={nr.trials}" for nr in not_run(g.trials))
        table.add_row(
            g.benchmark,
            g.arm,
            _model_cell(g.model, g.served_by),
            f"{len(g.tasks)}×{len(g.seeds)}",
            _pct(avg_at_k(ok)),
            _pct(pooled_rate(ok, g.graded)),
            str(g.count("resolved")),
            str(g.count("unresolved")),
            str(g.count("model_error")),
            f"[red]{infra}[/red]" if infra else "0",
            f"[magenta]{missing}[/magenta]" if missing else "0",
            ", ".join(f"{k}={v}" for k, v in sorted(classes.items())) or "–",
            refused or "–",
        )
    warnings = [f"[bold yellow]warning:[/bold yellow] {escape(cv.text)}" for cv in image_caveats([run])]
    if not table.rows:
        warnings.insert(0, "no trials")
    if warnings:
        table.caption = "\n".join(warnings)
    return table
