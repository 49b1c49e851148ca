"""Timeout sensitivity: would a verdict survive a faster or slower cluster?

Terminal-Bench's agent timeouts are wall clock, so a score depends on how fast the model was
served; results are published with multiplied timeouts (``agent.timeout_multiplier``). An
experiment that runs the same arm at two multipliers (conf/experiment/tb2-timeouts.yaml: 1x,
the tasks' own timeouts, and 4x) is shown here from the Parquet rows alone:

- per task, the verdict under each multiplier (majority of seeds, as McNemar counts it in the
  ablation table) and whether they differ, with the lower multiplier's trials cut at the limit
  (exit reason ``max_time``);
- per pair, one line: n tasks, n whose verdict differs, and which way (passes only with the
  longer budget, or only with the shorter one), the paired difference with the ablation table's
  bootstrap CI.

Which arms form a pair: two arms of one run, benchmark and model whose declared overrides are
the same once ``agent.timeout_multiplier=...`` is taken out, and whose rows record different
multipliers (``timeout_multiplier``; a row from before the column existed ran at 1x). Strict
twins pair with strict twins. A pair need not be declared as one: in reproduce-frognano the
arm ``frognano-4b`` (1x, every benchmark) and ``frognano-4b-timeouts-4x`` (its overrides plus
the multiplier, Terminal-Bench only) pair on Terminal-Bench, where both have rows; what an arm
is limited to (``benchmarks``, ``strict``) is not an override and does not keep them apart.
The per-benchmark budgets (``experiment.per_benchmark``) are the experiment's, the same for
every arm, so they do not either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from farm.report.ablation import majority, mcnemar, paired_difference
from farm.report.data import GRADED, Group, RunData
from farm.report.layout import Table, fmt, fmt_ci, trace_columns
from farm.report.stats import BootstrapOptions

MULTIPLIER_KEY = "agent.timeout_multiplier"
STRICT_SUFFIX = "-strict"  # farm/config/arms.py names the twins so (the report reads no config code)


@dataclass(frozen=True)
class TaskVerdicts:
    task_id: str
    low: str  # pass | fail | not graded
    high: str
    low_passes: str  # "resolved seeds/seeds"
    high_passes: str
    low_max_time: int  # trials of the lower multiplier cut at the time limit
    high_max_time: int

    @property
    def differ(self) -> bool | None:
        """None when either side has no graded trial (nothing to compare)."""
        if "not graded" in (self.low, self.high):
            return None
        return self.low != self.high


@dataclass(frozen=True)
class TimeoutPair:
    run_id: str
    config_hash: str
    benchmark: str
    model: str
    low_arm: str
    high_arm: str
    low_multiplier: float
    high_multiplier: float
    low_budget_s: float  # median agent budget of the rows (NaN: not recorded)
    high_budget_s: float
    tasks: list[TaskVerdicts]
    only_high: int  # tasks that pass only with the longer budget
    only_low: int  # ... only with the shorter one
    delta_pts: float  # high − low, paired by task and seed
    delta_ci: tuple[float, float]

    @property
    def n_tasks(self) -> int:
        return len(self.tasks)

    @property
    def n_differ(self) -> int:
        return sum(bool(t.differ) for t in self.tasks)

    @property
    def summary(self) -> str:
        """One line: n tasks, n differ, which direction."""
        lo, hi = f"{self.low_multiplier:g}x", f"{self.high_multiplier:g}x"
        if not self.n_differ:
            way = "no verdict changes"
        elif self.only_high and not self.only_low:
            way = f"all pass only at {hi}"
        elif self.only_low and not self.only_high:
            way = f"all pass only at {lo}"
        else:
            way = "both ways"
        return (f"{self.benchmark} {self.low_arm} ({lo}) vs {self.high_arm} ({hi}): the verdict differs on "
                f"{self.n_differ} of {self.n_tasks} tasks ({self.only_high} pass only at {hi}, "
                f"{self.only_low} only at {lo}; {way})")


def _arm_keys(run: RunData) -> dict[str, tuple[str, ...]]:
    """Declared arm -> its overrides without the timeout multiplier; strict twins get a marker."""
    exp = run.config.get("experiment") or {}
    keys: dict[str, tuple[str, ...]] = {}
    twins: list[str] = []
    for arm in exp.get("arms") or []:
        if not isinstance(arm, dict) or "name" not in arm:
            continue
        items = []
        for part in ("overrides", "last_overrides"):
            ov = arm.get(part) or []
            if isinstance(ov, dict):
                ov = [f"{k}={v}" for k, v in ov.items()]
            items += [f"{part}:{str(o).strip()}" for o in ov
                      if not str(o).strip().lstrip("+").startswith(MULTIPLIER_KEY + "=")]
        keys[str(arm["name"])] = tuple(items)
        if arm.get("strict", True):  # strict: false: the arm has no twin
            twins.append(str(arm["name"]))
    if exp.get("strict_pair"):
        for name in twins:
            keys.setdefault(name + STRICT_SUFFIX, (*keys[name], "<strict twin>"))
    return keys


def _multiplier(g: Group) -> float | None:
    """The multiplier the group's rows ran under; None: no rows, or rows that disagree."""
    if not g.trials:
        return None
    values = {1.0 if t.get("timeout_multiplier") is None else float(t["timeout_multiplier"]) for t in g.trials}
    return values.pop() if len(values) == 1 else None


def _median_budget(g: Group) -> float:
    values = [float(t["agent_budget_s"]) for t in g.trials if t.get("agent_budget_s") is not None]
    return float(np.median(values)) if values else math.nan


def _task_side(g: Group, i: int, ok: np.ndarray) -> tuple[str, str, int]:
    graded = np.isin(g.status[i], GRADED)
    verdict = "not graded" if not graded.any() else "pass" if ok[i] else "fail"
    cut = sum(1 for t in g.trials if t["task_id"] == g.tasks[i] and t.get("exit_reason") == "max_time")
    return verdict, f"{int(g.resolved[i].sum())}/{g.status.shape[1]}", cut


def _pair(low: Group, high: Group, m_low: float, m_high: float, opts: BootstrapOptions) -> TimeoutPair:
    ok_low, ok_high = majority(low.resolved), majority(high.resolved)
    tasks = []
    for i, task in enumerate(low.tasks):
        lv, lp, lcut = _task_side(low, i, ok_low)
        hv, hp, hcut = _task_side(high, i, ok_high)
        tasks.append(TaskVerdicts(task, lv, hv, lp, hp, lcut, hcut))
    only_low, only_high, _ = mcnemar(low.resolved, high.resolved)
    delta, dlo, dhi = paired_difference(low.resolved, high.resolved, opts)
    return TimeoutPair(
        run_id=low.run_id, config_hash=f"{low.config_hash},{high.config_hash}", benchmark=low.benchmark,
        model=low.model, low_arm=low.arm, high_arm=high.arm, low_multiplier=m_low, high_multiplier=m_high,
        low_budget_s=_median_budget(low), high_budget_s=_median_budget(high), tasks=tasks,
        only_high=only_high, only_low=only_low, delta_pts=delta, delta_ci=(dlo, dhi),
    )


def timeout_pairs(run: RunData, groups: list[Group], opts: BootstrapOptions) -> list[TimeoutPair]:
    """Every (lowest multiplier, higher multiplier) pair of arms in ``run`` (none: no such arms)."""
    keys = _arm_keys(run)
    buckets: dict[tuple[str, str, tuple[str, ...]], list[tuple[float, Group]]] = {}
    for g in groups:
        m = _multiplier(g)
        if g.run_id != run.run_id or g.arm not in keys or m is None:
            continue
        buckets.setdefault((g.benchmark, g.model, keys[g.arm]), []).append((m, g))
    pairs = []
    for (_bench, _model, _key), members in sorted(buckets.items(), key=lambda kv: kv[0][:2]):
        if len({m for m, _ in members}) < 2:
            continue
        members.sort(key=lambda mg: mg[0])
        m_low, low = members[0]
        if sum(m == m_low for m, _ in members) > 1:  # two arms at the lowest multiplier: no one reference
            continue
        for m, g in members[1:]:
            if g.tasks == low.tasks and g.seeds == low.seeds:  # outcome_groups shares them per benchmark
                pairs.append(_pair(low, g, m_low, m, opts))
    return pairs


def timeout_tables(pairs: list[TimeoutPair], level: float) -> list[Table]:
    """"Timeout sensitivity" (one line per pair) and "Timeout sensitivity by task": only for runs
    with a timeout pair."""
    if not pairs:
        return []
    pct = f"{100 * level:.0f}%"
    summary: list[dict[str, Any]] = []
    per_task: list[dict[str, Any]] = []
    for p in pairs:
        ident = {"run_id": p.run_id, "config_hash": p.config_hash, "benchmark": p.benchmark, "model": p.model}
        summary.append({
            **ident, "low_arm": p.low_arm, "high_arm": p.high_arm, "low_multiplier": p.low_multiplier,
            "high_multiplier": p.high_multiplier, "low_budget_s": p.low_budget_s, "high_budget_s": p.high_budget_s,
            "n_tasks": p.n_tasks, "n_differ": p.n_differ, "pass_only_high": p.only_high, "pass_only_low": p.only_low,
            "low_max_time_trials": sum(t.low_max_time for t in p.tasks),
            "high_max_time_trials": sum(t.high_max_time for t in p.tasks),
            "delta": p.delta_pts, "delta_ci_low": p.delta_ci[0], "delta_ci_high": p.delta_ci[1],
            "summary": p.summary,
        })
        for t in p.tasks:
            per_task.append({
                **ident, "low_arm": p.low_arm, "high_arm": p.high_arm, "low_multiplier": p.low_multiplier,
                "high_multiplier": p.high_multiplier, "task_id": t.task_id, "low_verdict": t.low,
                "high_verdict": t.high, "low_resolved_seeds": t.low_passes, "high_resolved_seeds": t.high_passes,
                "differ": t.differ, "low_max_time_trials": t.low_max_time, "high_max_time_trials": t.high_max_time,
            })

    def arm(side: str) -> Any:
        return lambda r: f"{r[side + '_arm']} ({r[side + '_multiplier']:g}x)"

    def differ(r: dict[str, Any]) -> str:
        return "–" if r["differ"] is None else "yes" if r["differ"] else "no"

    return [
        Table("timeouts", "Timeout sensitivity", summary, [
            ("benchmark", lambda r: r["benchmark"]),
            ("model", lambda r: r["model"]),
            ("shorter budget", arm("low")),
            ("longer budget", arm("high")),
            ("agent budget s (median)", lambda r: f"{fmt(r['low_budget_s'], 0)} / {fmt(r['high_budget_s'], 0)}"),
            ("tasks", lambda r: str(r["n_tasks"])),
            ("verdict differs", lambda r: str(r["n_differ"])),
            ("pass only longer / only shorter", lambda r: f"{r['pass_only_high']} / {r['pass_only_low']}"),
            ("trials cut at the limit (shorter / longer)",
             lambda r: f"{r['low_max_time_trials']} / {r['high_max_time_trials']}"),
            ("longer − shorter (pts)", lambda r: fmt(r["delta"])),
            (f"difference {pct} CI", lambda r: fmt_ci(r["delta_ci_low"], r["delta_ci_high"])),
            ("summary", lambda r: r["summary"]),
            *trace_columns(),
        ], note="The same arm under two agent.timeout_multiplier values on the same tasks and seeds. A task's "
                "verdict is pass when more than half of its seeds resolved; cut at the limit: trials that ended "
                "with exit reason max_time. The difference pairs the same task and seed (bootstrap CI)."),
        Table("timeout_tasks", "Timeout sensitivity by task", per_task, [
            ("benchmark", lambda r: r["benchmark"]),
            ("task", lambda r: r["task_id"]),
            ("shorter budget", lambda r: f"{r['low_verdict']} ({r['low_resolved_seeds']}) at {r['low_multiplier']:g}x"),
            ("longer budget", lambda r: f"{r['high_verdict']} ({r['high_resolved_seeds']}) at "
                                        f"{r['high_multiplier']:g}x"),
            ("differ", differ),
            ("cut at the limit (shorter / longer)",
             lambda r: f"{r['low_max_time_trials']} / {r['high_max_time_trials']}"),
            *trace_columns(),
        ], note="–: one side has no graded trial of the task (infra errors or not run)."),
    ]
