"""Resolve-rate statistics of one task × seed outcome matrix.

Conventions (docs/report.md):
- Avg@k = mean over seeds of the per-seed resolve rate, denominator = every task of the
  benchmark in the plan; infra errors and missing trials count as failures.
- The "graded" rate excludes infra errors and missing trials from numerator and denominator
  and is the pooled ratio resolved / graded (per seed: resolved_s / graded_s).
- pass@k uses the unbiased estimator of Chen et al. (2021) per task, averaged over tasks;
  pass^k (all k attempts resolve; tau-bench, Yao et al. 2024) its counterpart C(c, k) / C(n, k).
- The standard error is the normal approximation sqrt(p (1 - p) / n) with n = tasks, the
  binomial formula lm-eval-harness and NeMo print beside a score.
- Confidence intervals: percentile bootstrap that resamples tasks with replacement and, inside
  each resampled task, its seeds with replacement (two-stage cluster bootstrap), so both the
  between-task and the within-task (sampling) variance enter the interval. When every graded
  cell has the same outcome (0 of 14, all of them) every resample is the same and the bootstrap
  says [0, 0]: certainty it does not have. Then the interval is the Wilson score interval with
  one observation per task instead (0 of 14 → [0, 21.5]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import binomtest

from farm.report.data import CELL_STATUSES, Group
from farm.report.limits import whose
from farm.report.power import VarianceParts, variance_parts

PCT = 100.0


@dataclass(frozen=True)
class BootstrapOptions:
    samples: int = 2000
    seed: int = 0
    level: float = 0.95


def per_seed_rates(ok: np.ndarray, mask: np.ndarray | None = None) -> list[float]:
    """Resolve rate of each seed column in percent; ``mask`` restricts the denominator."""
    mask = np.ones_like(ok, dtype=bool) if mask is None else mask
    den = mask.sum(axis=0)
    num = (ok & mask).sum(axis=0)
    return [float(PCT * n / d) if d else math.nan for n, d in zip(num, den)]


def avg_at_k(ok: np.ndarray) -> float:
    """Mean over seeds of the per-seed resolve rate (all tasks in the denominator)."""
    if ok.size == 0:
        return math.nan
    return float(np.mean(per_seed_rates(ok)))


def pooled_rate(ok: np.ndarray, mask: np.ndarray) -> float:
    den = int(mask.sum())
    return float(PCT * (ok & mask).sum() / den) if den else math.nan


def pass_at_k(n: np.ndarray, c: np.ndarray, k: int) -> float:
    """Mean over tasks of 1 - C(n-c, k) / C(n, k); tasks with fewer than k samples are skipped."""
    values = []
    for ni, ci in zip(n.tolist(), c.tolist()):
        if ni < k:
            continue
        values.append(1.0 if ni - ci < k else 1.0 - math.comb(ni - ci, k) / math.comb(ni, k))
    return float(PCT * np.mean(values)) if values else math.nan


def pass_hat_k(n: np.ndarray, c: np.ndarray, k: int) -> float:
    """Mean over tasks of C(c, k) / C(n, k): the chance that k of a task's n attempts, drawn
    without replacement, all resolved (unbiased for p^k, as pass@k's form is for 1 - (1-p)^k);
    with n = k it is the share of tasks resolved on every attempt. Tasks with n < k are skipped."""
    values = [math.comb(ci, k) / math.comb(ni, k) for ni, ci in zip(n.tolist(), c.tolist()) if ni >= k]
    return float(PCT * np.mean(values)) if values else math.nan


def normal_stderr(rate_pct: float, n: int) -> float:
    """sqrt(p (1 - p) / n) in points for a rate given in percent over ``n`` units (tasks)."""
    if n <= 0 or math.isnan(rate_pct):
        return math.nan
    p = rate_pct / PCT
    return float(PCT * math.sqrt(p * (1.0 - p) / n))


def flip_rate(ok: np.ndarray, mask: np.ndarray) -> float:
    """Share (percent) of tasks whose graded outcome differs between seeds.

    Only graded cells count (an infra error is not the model changing its mind); tasks with
    fewer than two graded seeds cannot flip and are left out. NaN when no task qualifies (k=1).
    """
    flips = eligible = 0
    for row_ok, row_mask in zip(ok, mask):
        vals = row_ok[row_mask]
        if vals.size < 2:
            continue
        eligible += 1
        flips += int(vals.min() != vals.max())
    return float(PCT * flips / eligible) if eligible else math.nan


def _rng(opts: BootstrapOptions) -> np.random.Generator:
    # A fresh generator per statistic: every CI depends only on its own data and the seed, not
    # on how many other CIs were computed before it.
    return np.random.default_rng(opts.seed)


def _resample_indices(rng: np.random.Generator, n_tasks: int, n_seeds: int, b: int):
    ti = rng.integers(0, n_tasks, size=(b, n_tasks))
    si = rng.integers(0, n_seeds, size=(b, n_tasks, n_seeds))
    return ti[:, :, None], si


def bootstrap_ratio(
    num: np.ndarray, den: np.ndarray, opts: BootstrapOptions, chunk: int = 250
) -> tuple[float, float]:
    """Percentile CI of sum(num)/sum(den) under the two-stage (task, then seed) bootstrap.

    ``num``/``den`` are (T, S) arrays; for Avg@k den is all ones and the statistic is the mean.
    Several statistics can be bootstrapped jointly by passing a (T, S, m) stack; see
    ``bootstrap_paired``.
    """
    n_tasks, n_seeds = num.shape[:2]
    if n_tasks == 0 or n_seeds == 0:
        return math.nan, math.nan
    rng = _rng(opts)
    stats = []
    for start in range(0, opts.samples, chunk):
        b = min(chunk, opts.samples - start)
        ti, si = _resample_indices(rng, n_tasks, n_seeds, b)
        n = num[ti, si].sum(axis=(1, 2))
        d = den[ti, si].sum(axis=(1, 2))
        # a resample without any graded cell has no rate: NaN, left out of the percentiles
        stats.append(np.where(d > 0, n / np.where(d > 0, d, 1), np.nan))
    values = np.concatenate(stats) * PCT
    return _percentile_ci(values, opts.level)


def rate_ci(num: np.ndarray, den: np.ndarray, opts: BootstrapOptions) -> tuple[float, float]:
    """CI of a resolve rate: the two-stage bootstrap, or Wilson where the bootstrap is a point."""
    graded = num[den > 0]
    if graded.size and (graded == graded.flat[0]).all():  # every resample would be this one value
        return wilson_ci(float(graded.flat[0]), int((den.sum(axis=1) > 0).sum()), opts.level)
    return bootstrap_ratio(num, den, opts)


def wilson_ci(rate: float, n: int, level: float) -> tuple[float, float]:
    """Wilson score interval, in points, of a rate observed on ``n`` tasks (one observation each)."""
    if n == 0:
        return math.nan, math.nan
    ci = binomtest(round(rate * n), n).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low) * PCT, float(ci.high) * PCT


def _percentile_ci(values: np.ndarray, level: float) -> tuple[float, float]:
    values = values[~np.isnan(values)]
    if values.size == 0:
        return math.nan, math.nan
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(values, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


@dataclass
class GroupStats:
    run_id: str
    config_hash: str
    benchmark: str
    arm: str
    model: str
    n_tasks: int
    k: int  # seeds scheduled
    scheduled: int
    counts: dict[str, int]
    avg_at_k: float
    ci_low: float
    ci_high: float
    per_seed: list[float]
    graded_rate: float
    graded_ci_low: float
    graded_ci_high: float
    graded_per_seed: list[float]
    pass_at: dict[int, float]
    flip_rate: float
    pass_hat: dict[int, float] = field(default_factory=dict)  # pass^j, j = 1..k
    stderr: float = math.nan  # normal approximation of Avg@k, points, n = tasks
    # (status, error class, whose: farm/report/limits.py) -> trials; a sandbox_lost splits by its loss cause
    error_classes: dict[tuple[str, str, str], int] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=list)
    variance: VarianceParts | None = None  # between-/within-task components (statistical planner)

    @property
    def infra_or_missing(self) -> int:
        return self.counts["infra_error"] + self.counts["missing"]

    @property
    def graded(self) -> int:
        return self.scheduled - self.infra_or_missing


def group_stats(group: Group, opts: BootstrapOptions | None = None) -> GroupStats:
    opts = opts or BootstrapOptions()
    ok = group.resolved
    graded = group.graded
    n_tasks, k = ok.shape
    lo, hi = rate_ci(ok.astype(float), np.ones_like(ok, dtype=float), opts)
    glo, ghi = rate_ci((ok & graded).astype(float), graded.astype(float), opts)
    n = np.full(n_tasks, k)
    c = ok.sum(axis=1)
    classes: dict[tuple[str, str, str], int] = {}
    for t in group.trials:
        if t["status"] in ("resolved", "unresolved") and not t.get("error_class"):
            continue
        cls = (t["status"], t.get("error_class") or "-", whose(t))
        classes[cls] = classes.get(cls, 0) + 1
    return GroupStats(
        run_id=group.run_id,
        config_hash=group.config_hash,
        benchmark=group.benchmark,
        arm=group.arm,
        model=group.model,
        n_tasks=n_tasks,
        k=k,
        scheduled=group.scheduled,
        counts={s: group.count(s) for s in CELL_STATUSES},
        avg_at_k=avg_at_k(ok),
        ci_low=lo,
        ci_high=hi,
        per_seed=per_seed_rates(ok),
        graded_rate=pooled_rate(ok, graded),
        graded_ci_low=glo,
        graded_ci_high=ghi,
        graded_per_seed=per_seed_rates(ok, graded),
        pass_at={j: pass_at_k(n, c, j) for j in range(1, k + 1)},
        flip_rate=flip_rate(ok, graded),
        pass_hat={j: pass_hat_k(n, c, j) for j in range(1, k + 1)},
        stderr=normal_stderr(avg_at_k(ok), n_tasks),
        error_classes=classes,
        seeds=list(group.seeds),
        variance=variance_parts(ok),
    )
