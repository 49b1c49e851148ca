"""Terminal summary of one run: the report's main table, split in two sections to fit 100 columns.

The first section says whether the claim holds (Avg@k, CI, SE, claim, verdict); the second how
far to trust it (tasks × k, clean Avg@k, infra errors, trials not run, pass@k / pass^k,
graded-only rate, then a line of error classes per group). Numbers are the same rows as the report's main table
(farm/report/main_table.py), so the terminal and report.md never disagree.
"""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.console import Group as RichGroup
from rich.markup import escape
from rich.table import Table

from farm.report.caveats import run_caveats
from farm.report.claims import ClaimsRegistry, load_claims
from farm.report.data import RunData
from farm.report.layout import fmt, fmt_ci
from farm.report.limits import CAUSE_UNKNOWN, MODEL_LIMIT, whose
from farm.report.main_table import claim_cell, infra_cell, model_cell
from farm.report.retries import retry_line, retry_rows
from farm.report.stats import pooled_rate
from farm.report.tables import ReportContent, ReportOptions, compute

WIDTH = 100  # the terminal width the summary is laid out for (tests render it at this width)
VERDICT_STYLE = {"reproduced": "green", "below": "red", "above": "red", "incomplete": "magenta"}


# (header, justify, widest the column may grow to; None: a number that never wraps). The caps
# are chosen so that the widest layout fits WIDTH (score: 7 columns, 6 separators; trust: 9 and
# 8) with the widest numbers ("[100.0, 100.0]", "2000×10"): rich then never has to collapse
# columns, which can overshoot the terminal, where the console crops the last numbers.
Spec = tuple[str, str, int | None]
SCORE: list[Spec] = [
    ("benchmark\narm", "left", 20), ("model", "left", 17), ("Avg@k\n%", "right", None),
    ("95% CI", "right", None), ("±SE", "right", None), ("claim", "right", 12), ("verdict", "left", 15),
]
TRUST: list[Spec] = [
    ("benchmark\narm", "left", 20), ("tasks\n×k", "right", None), ("clean\n%", "right", None),
    ("clean\n95% CI", "right", None), ("infra\nerrors", "right", 11), ("not\nrun", "right", None),
    ("pass@k\n%", "right", None), ("pass^k\n%", "right", None), ("graded\n%", "right", None),
]


def _table(title: str | None, columns: list[Spec], first_width: int) -> Table:
    # no vertical rules, one space of padding: two characters between columns instead of three
    table = Table(title=title, title_justify="left", expand=False, box=box.SIMPLE_HEAD, show_edge=False,
                  padding=(0, 1, 0, 0), pad_edge=False)
    for i, (name, just, cap) in enumerate(columns):
        # numbers never wrap or shrink to "…": the text columns around them give way (and fold)
        table.add_column(name, justify=just, no_wrap=cap is None, overflow="fold",  # type: ignore[arg-type]
                         max_width=cap, min_width=first_width if i == 0 else None)
    return table


def summary_table(run: RunData, registry: ClaimsRegistry | None = None,
                  options: ReportOptions | None = None, content: ReportContent | None = None) -> RichGroup:
    """The run's main table for a terminal of 100 columns: score and claim, then trust.

    ``registry``/``options`` default to the run's ``report.claims_dir`` and ``report.*``;
    ``content``, the report already computed for this run (and others), is used instead of
    computing it again (its rows of this run: every statistic depends on its own group only)."""
    if content is None:
        options = options or ReportOptions.from_config(run.config)
        if registry is None:
            claims_dir = (run.config.get("report") or {}).get("claims_dir")
            registry = load_claims(Path(claims_dir) if claims_dir else None)
        content = compute([run], registry, options)
    groups = [g for g in content.groups if g.run_id == run.run_id]
    main = [r for r in content.main if r.run_id == run.run_id]
    graded = {(g.benchmark, g.arm, g.model): pooled_rate(g.resolved, g.graded) for g in groups}
    classes: dict[tuple[str, str, str], dict[tuple[str, str], int]] = {}  # (class, whose label) -> trials
    for g in groups:
        per = classes.setdefault((g.benchmark, g.arm, g.model), {})
        for t in g.trials:
            if t["status"] in ("model_error", "infra_error") or t.get("error_class"):
                # the status says whose the rest is; these two it does not: an unresolved row that is a
                # limit the model's commands hit, and an infra error that may have been the model's
                label = whose(t)
                name = (f"{t['status']}:{t.get('error_class') or '-'}",
                        f" ({label})" if label in (MODEL_LIMIT, CAUSE_UNKNOWN) else "")
                per[name] = per.get(name, 0) + 1

    # the benchmark and arm names keep their width (up to 20) so they are not broken mid-word
    first = min(20, max((len(x) for r in main for x in (r.benchmark, r.arm)), default=9))
    score = _table(f"run {run.run_id} · config {run.config_hash[:12]}", SCORE, first)
    trust = _table(None, TRUST, first)
    error_lines = []
    for row in main:
        r = vars(row)
        key = (row.benchmark, row.arm, row.model)
        where = escape(f"{row.benchmark}\n{row.arm}")
        style = VERDICT_STYLE.get(row.verdict)
        verdict = escape(row.verdict_text)
        score.add_row(
            where, escape(model_cell(row.model, row.served_by)), fmt(row.avg_at_k),
            fmt_ci(row.ci_low, row.ci_high), fmt(row.stderr), escape(claim_cell(r)),
            f"[{style}]{verdict}[/{style}]" if style else verdict,
        )
        infra = infra_cell(r)
        trust.add_row(
            where, f"{row.tasks}×{row.k}", fmt(row.clean_avg_at_k), fmt_ci(row.clean_ci_low, row.clean_ci_high),
            f"[red]{infra}[/red]" if row.infra_errors else infra,
            f"[magenta]{row.not_run}[/magenta]" if row.not_run else "0",
            fmt(row.pass_at_k), fmt(row.pass_hat_k), fmt(graded[key]),
        )
        # the not-run count splits here into refused (task_unsupported:*) and missing trials
        named = sorted(classes[key].items()) + ([(("missing", ""), row.not_run_missing)] if row.not_run_missing
                                                else [])
        if named:
            error_lines.append(escape(f"error classes, {row.benchmark} · {row.arm}: "
                                      + ", ".join(f"{k}={v}{label}" for (k, label), v in named)))
    # trials that needed a second agent run, and whether they score like the rest (farm/report/retries.py)
    error_lines += [escape(f"re-run trials, {r.benchmark} · {r.arm}: {retry_line(r)}")
                    for r in retry_rows(groups) if retry_line(r)]
    warnings = error_lines + [f"[bold yellow]warning:[/bold yellow] {escape(cv.text)}" for cv in run_caveats([run])]
    if not main:
        warnings.insert(0, "no trials")
    if warnings:
        trust.caption = "\n".join(warnings)
        trust.caption_justify = "left"
    return RichGroup(score, trust)
