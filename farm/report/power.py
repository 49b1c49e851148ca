"""Statistical planner: how small a difference a run of T tasks × k seeds can detect, and how
many seeds it would take to tell a claim (or an arm) from a given alternative.

The model (docs/scale.md, "Statistical planner"): the outcome of task t on seed s is
Y_ts = mu + b_t + e_ts, with b_t the task's deviation (between-task variance sigma_b^2) and
e_ts the seed-to-seed noise inside a task (within-task variance sigma_w^2). The Avg@k
estimate, the mean of the T × k cells, then has

    Var = sigma_b^2 / T + sigma_w^2 / (T k)                             (tasks and seeds)
        = p (1 - p) / (T k) * (1 + (k - 1) rho),   rho = sigma_b^2 / (sigma_b^2 + sigma_w^2)

the design-effect form of a clustered sample (clusters = tasks, k cells per cluster). When the
task set is fixed (a claim about exactly these 500 tasks, not about a population of tasks), the
between-task term is not sampling noise and Var = sigma_w^2 / (T k) (seeds only).

Both components come from the measured matrix by the one-way ANOVA (method of moments)
estimators: sigma_w^2 = mean over tasks of the unbiased variance of a task's k outcomes, and
sigma_b^2 = max(0, S_m^2 - sigma_w^2 / k), where S_m^2 is the sample variance of the per-task
means. A two-sided z test at level alpha with power 1 - beta detects a difference delta when
delta >= (z_{1-alpha/2} + z_{1-beta}) sqrt(Var): that bound is the minimum detectable difference
(MDD). Solving the same inequality for k gives the seeds needed,

    k >= sigma_w^2 / (T (delta^2 / (z_{1-alpha/2} + z_{1-beta})^2 - sigma_b^2 / T)),

which has no solution when delta is below the task floor (z_{1-alpha/2} + z_{1-beta}) sigma_b /
sqrt(T): more seeds can never resolve a gap the task sample alone blurs. The claim's own seed
noise is not included (the published number is taken as exact).

An ablation uses the same formulas on the paired differences d_ts = arm_ts - baseline_ts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from farm.errors import ConfigError

PCT = 100.0


@dataclass(frozen=True)
class PowerOptions:
    alpha: float = 0.05  # two-sided
    power: float = 0.8
    delta_pts: float = 3.0  # the fixed alternative: claim (or baseline) +- this many points

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ConfigError(f"report.level: alpha = 1 - level must lie in (0, 1), got {self.alpha!r}")
        if not 0.0 < self.power < 1.0:
            raise ConfigError(f"report.power: expected a number in (0, 1), got {self.power!r}")
        if not self.delta_pts > 0.0:
            raise ConfigError(f"report.power_delta_pts: expected a positive number of points, got {self.delta_pts!r}")

    @property
    def z(self) -> float:
        """z_{1-alpha/2} + z_{power}: the MDD in standard errors."""
        return float(norm.ppf(1.0 - self.alpha / 2.0) + norm.ppf(self.power))


@dataclass(frozen=True)
class VarianceParts:
    """Variance components of a (tasks, seeds) outcome matrix, in proportion units (not %)."""

    tasks: int
    seeds: int
    between: float  # sigma_b^2; NaN with fewer than 2 seeds (not separable from sigma_w^2)
    within: float  # sigma_w^2; NaN with fewer than 2 seeds
    means_var: float  # S_m^2, sample variance of the per-task means; NaN with fewer than 2 tasks

    @property
    def icc(self) -> float:
        total = self.between + self.within
        return self.between / total if total > 0 else math.nan

    def var_of_mean(self, seeds: int | None = None, fixed_tasks: bool = False) -> float:
        """Variance of the mean of T tasks × ``seeds`` cells (default: the run's seeds)."""
        k = self.seeds if seeds is None else seeds
        if self.tasks < 1 or k < 1:
            return math.nan
        if not fixed_tasks and k == self.seeds and not math.isnan(self.means_var) and math.isnan(self.within):
            return self.means_var / self.tasks  # k = 1: the clustered variance needs no split
        within = self.within / (self.tasks * k)
        return within if fixed_tasks else self.between / self.tasks + within


def variance_parts(y: np.ndarray) -> VarianceParts:
    """ANOVA estimates of sigma_b^2 and sigma_w^2 from a (tasks, seeds) array of outcomes."""
    y = np.asarray(y, dtype=float)
    n_tasks, k = y.shape if y.ndim == 2 else (0, 0)
    means_var = float(np.var(y.mean(axis=1), ddof=1)) if n_tasks >= 2 and k >= 1 else math.nan
    if k < 2 or n_tasks < 1:
        return VarianceParts(n_tasks, k, math.nan, math.nan, means_var)
    within = float(np.var(y, axis=1, ddof=1).mean())
    between = max(0.0, means_var - within / k) if not math.isnan(means_var) else math.nan
    return VarianceParts(n_tasks, k, between, within, means_var)


def mdd_pts(parts: VarianceParts, opts: PowerOptions, seeds: int | None = None, fixed_tasks: bool = False) -> float:
    """Minimum detectable difference in points at T tasks × ``seeds`` seeds."""
    var = parts.var_of_mean(seeds, fixed_tasks)
    return PCT * opts.z * math.sqrt(var) if var >= 0 else math.nan


def task_floor_pts(parts: VarianceParts, opts: PowerOptions) -> float:
    """The MDD with infinitely many seeds (tasks and seeds design): z sigma_b / sqrt(T)."""
    if parts.tasks < 1 or math.isnan(parts.between):
        return math.nan
    return PCT * opts.z * math.sqrt(parts.between / parts.tasks)


def seeds_needed(parts: VarianceParts, delta_pts: float, opts: PowerOptions, fixed_tasks: bool = False,
                 ) -> int | None:
    """Smallest k whose MDD is at most |delta_pts|; None when no k suffices (or unknown)."""
    delta = abs(delta_pts) / PCT
    if math.isnan(delta) or delta == 0.0 or math.isnan(parts.within) or parts.tasks < 1:
        return None
    budget = (delta / opts.z) ** 2 - (0.0 if fixed_tasks else parts.between / parts.tasks)
    if budget <= 0.0:
        return None
    if parts.within == 0.0:
        return 1
    # the small epsilon keeps an exact solution (k = 3.0000000001 from rounding) at 3
    return max(1, math.ceil(parts.within / (parts.tasks * budget) - 1e-9))


@dataclass(frozen=True)
class PowerRow:
    """The planner's answer for one claim or one ablation arm."""

    tasks: int
    seeds: int
    sd_between_pts: float
    sd_within_pts: float
    icc: float
    mdd_pts: float  # tasks and seeds, at the run's size
    mdd_seeds_only_pts: float  # fixed task set
    task_floor_pts: float
    observed_gap_pts: float  # measured - claim, or arm - baseline
    seeds_for_observed: int | None
    seeds_for_observed_seeds_only: int | None
    delta_pts: float
    seeds_for_delta: int | None
    seeds_for_delta_seeds_only: int | None


def power_row(parts: VarianceParts, observed_gap_pts: float, opts: PowerOptions) -> PowerRow:
    """Planner row from the variance components of an outcome (or paired-difference) matrix."""
    return PowerRow(
        tasks=parts.tasks,
        seeds=parts.seeds,
        sd_between_pts=PCT * math.sqrt(parts.between) if not math.isnan(parts.between) else math.nan,
        sd_within_pts=PCT * math.sqrt(parts.within) if not math.isnan(parts.within) else math.nan,
        icc=parts.icc,
        mdd_pts=mdd_pts(parts, opts),
        mdd_seeds_only_pts=mdd_pts(parts, opts, fixed_tasks=True),
        task_floor_pts=task_floor_pts(parts, opts),
        observed_gap_pts=observed_gap_pts,
        seeds_for_observed=seeds_needed(parts, observed_gap_pts, opts),
        seeds_for_observed_seeds_only=seeds_needed(parts, observed_gap_pts, opts, fixed_tasks=True),
        delta_pts=opts.delta_pts,
        seeds_for_delta=seeds_needed(parts, opts.delta_pts, opts),
        seeds_for_delta_seeds_only=seeds_needed(parts, opts.delta_pts, opts, fixed_tasks=True),
    )


def seeds_cell(clustered: int | None, seeds_only: int | None, floor: float) -> str:
    """``"none (floor 4.8) · 2"``: tasks-and-seeds answer, then the fixed-task answer."""
    def one(k: int | None, with_floor: bool) -> str:
        if k is not None:
            return str(k)
        if with_floor and not math.isnan(floor):
            return f"none (floor {floor:.1f})"
        return "–"
    return f"{one(clustered, True)} · {one(seeds_only, False)}"
