"""Standard and strict side by side: how much of a score survives without the vendor's shortcuts.

``experiment.strict_pair=true`` runs every arm twice (farm/config/arms.py): *standard*, as the
vendor ran it (agent network as Leaf's registry has it, in-place grading), and ``<arm>-strict``
(no agent egress, history stripped, fresh grading where the answer is a patch, a tamper suspect
fails). Both run the same tasks and seeds, so for each (benchmark, arm, model) this module
gives, from the Parquet rows alone:

- standard and strict Avg@k with the report's own CIs (farm/report/stats.py);
- the paired strict − standard difference, cells paired by task and seed, with the paired
  two-stage bootstrap CI the ablation table uses (farm/report/ablation.py);
- the *leakage rate*: of every 1,000 standard passes, how many rest on a shortcut the strict
  twin closes — the trajectory looked the fix up upstream (hack-scan rule ``upstream_fetch``),
  read the repository's history (``git_history``), or dual grading marked the trial a
  ``tamper_suspect`` — with a Wilson interval over the passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from farm.report.ablation import paired_difference
from farm.report.data import Group
from farm.report.layout import Table, fmt, fmt_ci, trace_columns
from farm.report.stats import BootstrapOptions, GroupStats, wilson_ci

STRICT_SUFFIX = "-strict"  # farm/config/arms.py names the twins so (the report reads no config)
LEAK_RULES = ("upstream_fetch", "git_history")  # hack-scan rules that mean a looked-up answer
TAMPER = "tamper_suspect"


@dataclass(frozen=True)
class StrictRow:
    run_id: str
    config_hash: str  # standard arm's, then the strict twin's
    benchmark: str
    arm: str  # the standard arm
    model: str
    standard: float
    standard_ci: tuple[float, float]
    strict: float
    strict_ci: tuple[float, float]
    delta: float  # strict − standard, points, paired by task and seed
    delta_ci: tuple[float, float]
    passes: int  # standard trials resolved (latest attempt)
    leaked: int  # ... of which show an upstream lookup, a history read or a tamper flag
    by_cause: dict[str, int] = field(default_factory=dict)

    @property
    def leakage_per_1000(self) -> float:
        return 1000.0 * self.leaked / self.passes if self.passes else math.nan


def leak_causes(row: dict) -> set[str]:
    """What in a trial row marks its pass as looked up rather than solved."""
    rules = {str(f).split("@", 1)[0] for f in row.get("hack_flags") or []}
    causes = rules & set(LEAK_RULES)
    if row.get(TAMPER):
        causes.add(TAMPER)
    return causes


def strict_rows(groups: list[Group], stats: list[GroupStats], opts: BootstrapOptions) -> list[StrictRow]:
    """One row per standard group that has a strict twin in the same run (none: no twins ran)."""
    by_key = {(g.run_id, g.benchmark, g.arm, g.model): (g, s) for g, s in zip(groups, stats)}
    rows = []
    for (run_id, bench, arm, model), (g, s) in by_key.items():
        twin = by_key.get((run_id, bench, arm + STRICT_SUFFIX, model))
        if twin is None:
            continue
        tg, ts = twin
        if tg.tasks != g.tasks or tg.seeds != g.seeds:  # outcome_groups shares them per benchmark
            continue
        delta, lo, hi = paired_difference(g.resolved, tg.resolved, opts)
        passes = [t for t in g.trials if t["status"] == "resolved"]
        by_cause: dict[str, int] = {}
        leaked = 0
        for t in passes:
            causes = leak_causes(t)
            leaked += bool(causes)
            for c in causes:
                by_cause[c] = by_cause.get(c, 0) + 1
        rows.append(StrictRow(
            run_id=run_id, config_hash=f"{g.config_hash},{tg.config_hash}", benchmark=bench, arm=arm, model=model,
            standard=s.avg_at_k, standard_ci=(s.ci_low, s.ci_high),
            strict=ts.avg_at_k, strict_ci=(ts.ci_low, ts.ci_high),
            delta=delta, delta_ci=(lo, hi), passes=len(passes), leaked=leaked, by_cause=by_cause,
        ))
    return sorted(rows, key=lambda r: (r.run_id, r.benchmark, r.arm, r.model))


def leakage_ci(row: StrictRow, level: float) -> tuple[float, float]:
    """Wilson interval of the leakage rate, per 1,000 passes."""
    if not row.passes:
        return math.nan, math.nan
    lo, hi = wilson_ci(row.leaked / row.passes, row.passes, level)
    return 10.0 * lo, 10.0 * hi


def strict_table(groups: list[Group], stats: list[GroupStats], opts: BootstrapOptions) -> list[Table]:
    """The report's "Standard and strict" table (strict.csv): only for runs with strict twins."""
    strict = strict_rows(groups, stats, opts)
    if not strict:
        return []
    level = opts.level
    rows = []
    for r in strict:
        llo, lhi = leakage_ci(r, level)
        rows.append({
            "run_id": r.run_id, "config_hash": r.config_hash, "benchmark": r.benchmark, "arm": r.arm,
            "model": r.model, "standard_avg_at_k": r.standard, "standard_ci_low": r.standard_ci[0],
            "standard_ci_high": r.standard_ci[1], "strict_avg_at_k": r.strict, "strict_ci_low": r.strict_ci[0],
            "strict_ci_high": r.strict_ci[1], "delta": r.delta, "delta_ci_low": r.delta_ci[0],
            "delta_ci_high": r.delta_ci[1], "standard_passes": r.passes, "leaked_passes": r.leaked,
            "leakage_per_1000": r.leakage_per_1000, "leakage_ci_low": llo, "leakage_ci_high": lhi,
            "causes": ", ".join(f"{k}={v}" for k, v in sorted(r.by_cause.items())),
        })
    pct = f"{100 * level:.0f}%"
    return [Table(
        "strict", "Standard and strict", rows,
        [
            ("benchmark", lambda r: r["benchmark"]),
            ("arm", lambda r: r["arm"]),
            ("model", lambda r: r["model"]),
            ("standard Avg@k %", lambda r: fmt(r["standard_avg_at_k"])),
            (f"standard {pct} CI", lambda r: fmt_ci(r["standard_ci_low"], r["standard_ci_high"])),
            ("strict Avg@k %", lambda r: fmt(r["strict_avg_at_k"])),
            (f"strict {pct} CI", lambda r: fmt_ci(r["strict_ci_low"], r["strict_ci_high"])),
            ("strict − standard (pts)", lambda r: fmt(r["delta"])),
            (f"difference {pct} CI", lambda r: fmt_ci(r["delta_ci_low"], r["delta_ci_high"])),
            ("leakage per 1,000 passes", lambda r: f"{fmt(r['leakage_per_1000'], 0)} "
                                                   f"({r['leaked_passes']} of {r['standard_passes']})"),
            (f"leakage {pct} CI", lambda r: fmt_ci(r["leakage_ci_low"], r["leakage_ci_high"])),
            ("causes", lambda r: r["causes"] or "–"),
            *trace_columns(),
        ],
        note="standard: the arm as configured (the vendor's settings); strict: its <arm>-strict twin "
             "(experiment.strict_overrides: no agent network, history stripped, fresh grading of patch-graded "
             "tasks, tamper suspects fail). The difference pairs the same task and seed (bootstrap CI); leakage: "
             "standard passes whose tool calls fetched upstream (upstream_fetch), read git history (git_history) "
             "or that dual grading marked tamper_suspect, per 1,000 passes (Wilson CI)",
    )]
