"""Arm-versus-baseline comparison of an ablation run.

Every arm of an experiment runs the same tasks and seeds, so arms are compared on paired
(task, seed) cells:
- paired difference = mean over cells of (arm resolved - baseline resolved), in points, with a
  paired two-stage bootstrap CI (the same resampled tasks and seeds for both arms);
- McNemar's exact test on per-task outcomes, where a task counts as resolved when strictly
  more than half of its seeds resolved (a tie, possible with an even k, counts as unresolved
  for both arms alike). Tasks, not (task, seed) cells, are the independent units, which is what
  the test assumes; the bootstrap CI is the primary measure of uncertainty;
- the statistical planner (farm/report/power.py) on the paired differences: the minimum
  detectable difference at the run's size and the seeds needed to detect the observed Δ or a
  given one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import binomtest

from farm.report.data import Group, RunData
from farm.report.power import PowerOptions, PowerRow, power_row, variance_parts
from farm.report.stats import BootstrapOptions, GroupStats, bootstrap_ratio, wilson_ci


@dataclass
class ArmRow:
    run_id: str
    config_hash: str
    benchmark: str
    arm: str
    overrides: str
    is_baseline: bool
    n_tasks: int
    k: int
    resolve_rate: float
    ci_low: float
    ci_high: float
    delta_pts: float
    delta_ci_low: float
    delta_ci_high: float
    mcnemar_b: int  # tasks resolved by the baseline only
    mcnemar_c: int  # tasks resolved by this arm only
    mcnemar_p: float
    tool_calling_turns: int
    parallel_call_turns: int
    parallel_rate: float  # percent of tool-calling turns with more than one call
    steps_mean: float
    tokens_mean: float  # prompt + completion per trial
    wall_s_mean: float
    trials: int
    power: PowerRow | None = None  # None on the baseline row

    @property
    def verdict(self) -> str:
        """The paired comparison in words: better / worse when the Δ 95% CI excludes 0."""
        if self.is_baseline:
            return "baseline"
        if math.isnan(self.delta_ci_low) or math.isnan(self.delta_ci_high):
            return "no data"
        if self.delta_ci_low > 0:
            return "better"
        if self.delta_ci_high < 0:
            return "worse"
        return "no detectable difference"


def arm_specs(run: RunData) -> list[tuple[str, str]]:
    """(name, overrides as text) of the experiment's arms, in declaration order."""
    exp = run.config.get("experiment") or {}
    out = []
    for arm in exp.get("arms") or []:
        if not isinstance(arm, dict) or "name" not in arm:
            continue
        ov = arm.get("overrides") or []
        if isinstance(ov, dict):
            ov = [f"{k}={v}" for k, v in ov.items()]
        out.append((str(arm["name"]), " ".join(str(o) for o in ov)))
    return out


def majority(ok: np.ndarray) -> np.ndarray:
    return ok.sum(axis=1) * 2 > ok.shape[1]


def mcnemar(base_ok: np.ndarray, arm_ok: np.ndarray) -> tuple[int, int, float]:
    """Exact McNemar test on per-task majority outcomes: (b, c, two-sided p)."""
    b_task, a_task = majority(base_ok), majority(arm_ok)
    b = int((b_task & ~a_task).sum())
    c = int((~b_task & a_task).sum())
    p = binomtest(c, b + c, 0.5).pvalue if b + c else 1.0
    return b, c, float(p)


def paired_difference(
    base_ok: np.ndarray, arm_ok: np.ndarray, opts: BootstrapOptions
) -> tuple[float, float, float]:
    """Mean paired difference in points and its bootstrap CI.

    When every cell differs by the same amount (both arms agree everywhere, or one wins
    everywhere) every resample is the same and the bootstrap says e.g. [0, 0]. Then the interval
    bounds the difference by the Wilson interval of the share of tasks on which the arms disagree:
    with no disagreement among n tasks, |Δ| is at most z²/(n + z²) (14 tasks: ±21.5 points).
    """
    d = arm_ok.astype(float) - base_ok.astype(float)
    if d.size == 0:
        return math.nan, math.nan, math.nan
    same = float(d.flat[0])
    if not (d == same).all():
        lo, hi = bootstrap_ratio(d, np.ones_like(d), opts)
    else:  # every resample would be this one difference
        w_lo, w_hi = wilson_ci(abs(same), d.shape[0], opts.level)
        lo, hi = (-w_hi, w_hi) if same == 0 else (w_lo, w_hi) if same > 0 else (-w_hi, -w_lo)
    return float(100.0 * d.mean()), lo, hi


def _step_turns(steps: Any) -> dict[tuple[str, int], tuple[int, int]]:
    """(tool-calling turns, parallel turns) per (trial_key, attempt) from the steps table."""
    if steps is None or steps.num_rows == 0:
        return {}
    cols = steps.select(["trial_key", "attempt", "n_tool_calls"]).to_pydict()
    out: dict[tuple[str, int], list[int]] = {}
    for key, att, n in zip(cols["trial_key"], cols["attempt"], cols["n_tool_calls"]):
        acc = out.setdefault((key, att), [0, 0])
        if n and n > 0:
            acc[0] += 1
        if n and n > 1:
            acc[1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def tool_turns(trials: list[dict[str, Any]], steps: Any) -> tuple[int, int]:
    """Total tool-calling and parallel-call turns; the steps table fills trials lacking counts."""
    from_steps = _step_turns(steps) if any(t.get("tool_calling_turns") is None for t in trials) else {}
    tct = pct = 0
    for t in trials:
        if t.get("tool_calling_turns") is not None:
            tct += t["tool_calling_turns"]
            pct += t.get("parallel_call_turns") or 0
        else:
            a, b = from_steps.get((t["trial_key"], t["attempt"]), (0, 0))
            tct += a
            pct += b
    return tct, pct


def _mean(trials: list[dict[str, Any]], *cols: str) -> float:
    vals = []
    for t in trials:
        parts = [t.get(c) for c in cols]
        if all(p is None for p in parts):
            continue
        vals.append(sum(p or 0 for p in parts))
    return float(np.mean(vals)) if vals else math.nan


def ablation_rows(
    run: RunData,
    groups: list[Group],
    stats: list[GroupStats],
    opts: BootstrapOptions,
    planner: PowerOptions | None = None,
) -> list[ArmRow]:
    """Rows for every benchmark of the run that has at least two arms."""
    specs = arm_specs(run)
    order = [name for name, _ in specs]
    overrides = dict(specs)
    stat_of = {(s.benchmark, s.arm, s.model): s for s in stats}
    by_bench: dict[str, list[Group]] = {}
    for g in groups:
        by_bench.setdefault(g.benchmark, []).append(g)
    rows: list[ArmRow] = []
    for bench, gs in sorted(by_bench.items()):
        if len({g.arm for g in gs}) < 2:
            continue
        # Declared order first (the first declared arm is the baseline); undeclared arms after,
        # with an arm called base/baseline leading when nothing was declared.
        gs.sort(key=lambda g: (order.index(g.arm) if g.arm in order else len(order),
                               g.arm not in ("base", "baseline"), g.arm))
        base = gs[0]
        for g in gs:
            st = stat_of[(g.benchmark, g.arm, g.model)]
            # the baseline against itself is the same cells: exactly 0, not an estimate
            delta, dlo, dhi = (0.0, 0.0, 0.0) if g is base else paired_difference(base.resolved, g.resolved, opts)
            b, c, p = mcnemar(base.resolved, g.resolved)
            tct, pct = tool_turns(g.trials, run.steps)
            ran = g.trials
            diff = g.resolved.astype(float) - base.resolved.astype(float)
            power = None if g is base else power_row(variance_parts(diff), delta, planner or PowerOptions())
            rows.append(
                ArmRow(
                    run_id=g.run_id,
                    config_hash=g.config_hash,
                    benchmark=bench,
                    arm=g.arm,
                    overrides=overrides.get(g.arm, ""),
                    is_baseline=g is base,
                    n_tasks=st.n_tasks,
                    k=st.k,
                    resolve_rate=st.avg_at_k,
                    ci_low=st.ci_low,
                    ci_high=st.ci_high,
                    delta_pts=delta,
                    delta_ci_low=dlo,
                    delta_ci_high=dhi,
                    mcnemar_b=b,
                    mcnemar_c=c,
                    mcnemar_p=p,
                    tool_calling_turns=tct,
                    parallel_call_turns=pct,
                    parallel_rate=100.0 * pct / tct if tct else math.nan,
                    steps_mean=_mean(ran, "steps"),
                    tokens_mean=_mean(ran, "prompt_tokens", "completion_tokens"),
                    wall_s_mean=_mean(ran, "wall_s"),
                    trials=len(ran),
                    power=power,
                )
            )
    return rows
