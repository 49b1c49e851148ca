"""Statistical planner against hand-computed values, scipy's normal power, and a simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from farm.errors import ConfigError
from farm.report.claims import load_claims
from farm.report.power import PowerOptions, mdd_pts, power_row, seeds_needed, task_floor_pts, variance_parts
from farm.report.tables import ReportOptions, compute

from .synth import ablation_run, matrix_run

# 50 copies of four tasks whose seeds resolve 3/3, 2/3, 1/3, 0/3: T = 200, k = 3.
PATTERN = ([1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0])
Y = np.array(PATTERN * 50, dtype=float)
T, K = 200, 3
Z = norm.ppf(0.975) + norm.ppf(0.8)  # 1.95996 + 0.84162
# By hand: a task with m of 3 resolved has unbiased seed variance 3/2 · m/3 · (1 - m/3):
# 0, 1/3, 1/3, 0, so sigma_w^2 = 1/6. Task means 1, 2/3, 1/3, 0 around 1/2: squared deviations
# 1/4, 1/36, 1/36, 1/4 per four tasks, hence S_m^2 = 50 · 5/9 / 199, sigma_b^2 = S_m^2 - sigma_w^2 / 3.
SIGMA_W2 = 1 / 6
S_M2 = 50 * (1 / 4 + 1 / 36 + 1 / 36 + 1 / 4) / 199
SIGMA_B2 = S_M2 - SIGMA_W2 / 3
OPTS = PowerOptions()


def test_variance_components_are_the_anova_estimates():
    parts = variance_parts(Y)
    assert (parts.tasks, parts.seeds) == (T, K)
    assert parts.within == pytest.approx(SIGMA_W2)
    assert parts.means_var == pytest.approx(S_M2)
    assert parts.between == pytest.approx(SIGMA_B2)
    assert parts.icc == pytest.approx(SIGMA_B2 / (SIGMA_B2 + SIGMA_W2))


def test_mdd_at_the_runs_size_both_designs():
    parts = variance_parts(Y)
    clustered = 100 * Z * math.sqrt(SIGMA_B2 / T + SIGMA_W2 / (T * K))
    assert mdd_pts(parts, OPTS) == pytest.approx(clustered)
    assert mdd_pts(parts, OPTS) == pytest.approx(100 * Z * math.sqrt(S_M2 / T))  # the same at k = 3
    assert mdd_pts(parts, OPTS, fixed_tasks=True) == pytest.approx(100 * Z * math.sqrt(SIGMA_W2 / (T * K)))
    # the design-effect form p(1-p)/(T k) · (1 + (k - 1) ICC), with p = 1/2, agrees to the ANOVA's
    # sampling error (p(1 - p) = sigma_b^2 + sigma_w^2 only in expectation)
    icc = SIGMA_B2 / (SIGMA_B2 + SIGMA_W2)
    deff = 100 * Z * math.sqrt(0.25 / (T * K) * (1 + (K - 1) * icc))
    assert mdd_pts(parts, OPTS) == pytest.approx(deff, rel=0.01)
    assert task_floor_pts(parts, OPTS) == pytest.approx(100 * Z * math.sqrt(SIGMA_B2 / T))
    # numbers worked out by hand: 5.74 pts floor, 7.40 pts MDD, 4.67 pts seeds-only MDD
    assert task_floor_pts(parts, OPTS) == pytest.approx(5.74, abs=0.01)
    assert mdd_pts(parts, OPTS) == pytest.approx(7.40, abs=0.01)
    assert mdd_pts(parts, OPTS, fixed_tasks=True) == pytest.approx(4.67, abs=0.01)


def test_power_at_the_mdd_is_the_target_by_scipys_normal_distribution():
    parts = variance_parts(Y)
    se = 100 * math.sqrt(SIGMA_B2 / T + SIGMA_W2 / (T * K))
    d = mdd_pts(parts, OPTS)
    power = norm.cdf(d / se - norm.ppf(0.975)) + norm.cdf(-d / se - norm.ppf(0.975))
    assert power == pytest.approx(0.8, abs=1e-4)  # the far tail adds < 1e-4


@pytest.mark.parametrize(
    ("delta", "fixed", "expected"),
    [
        # budget = 0.08² / Z² - sigma_b^2 / 200 = 3.95e-4; k = (1/6) / (200 · 3.95e-4) = 2.11 -> 3
        (8.0, False, 3),
        # budget = 0.03² / Z² = 1.147e-4; k = (1/6) / (200 · 1.147e-4) = 7.27 -> 8
        (3.0, True, 8),
        (-3.0, True, 8),  # the sign of the gap does not matter
        (5.0, False, None),  # under the 5.74-point task floor: no number of seeds is enough
        (0.0, True, None),
    ],
)
def test_seeds_needed_hand_computed(delta, fixed, expected):
    parts = variance_parts(Y)
    assert seeds_needed(parts, delta, OPTS, fixed_tasks=fixed) == expected


def test_seeds_needed_is_the_smallest_k_that_reaches_the_power():
    parts = variance_parts(Y)
    for delta, fixed in ((8.0, False), (3.0, True), (12.0, False)):
        k = seeds_needed(parts, delta, OPTS, fixed_tasks=fixed)
        between = 0.0 if fixed else SIGMA_B2 / T

        def power(seeds: int, between: float = between, delta: float = delta) -> float:
            se = 100 * math.sqrt(between + SIGMA_W2 / (T * seeds))
            return norm.cdf(delta / se - norm.ppf(0.975))

        assert power(k) >= 0.8 - 1e-9
        assert k == 1 or power(k - 1) < 0.8


def test_one_seed_gives_the_clustered_mdd_but_no_split():
    y = Y[:, :1]
    parts = variance_parts(y)
    assert math.isnan(parts.within) and math.isnan(parts.between)
    assert mdd_pts(parts, OPTS) == pytest.approx(100 * Z * math.sqrt(np.var(y[:, 0], ddof=1) / T))
    assert math.isnan(mdd_pts(parts, OPTS, fixed_tasks=True))
    assert seeds_needed(parts, 10.0, OPTS) is None


def test_the_formula_predicts_the_spread_of_simulated_runs():
    """Beta-distributed task difficulty, Bernoulli seeds: the planner's SE from one run matches the
    standard deviation of Avg@k over many runs, for new tasks and for a fixed task set."""
    rng = np.random.default_rng(7)
    tasks, seeds, runs = 300, 3, 2000
    p_fixed = rng.beta(0.6, 0.6, size=tasks)
    fresh = rng.random((runs, tasks, seeds)) < rng.beta(0.6, 0.6, size=(runs, tasks, 1))
    fixed = rng.random((runs, tasks, seeds)) < p_fixed[None, :, None]
    for sample, fixed_tasks in ((fresh, False), (fixed, True)):
        empirical = 100 * sample.mean(axis=(1, 2)).std(ddof=1)
        predicted = np.mean([mdd_pts(variance_parts(sample[i]), OPTS, fixed_tasks=fixed_tasks) / Z
                             for i in range(0, runs, 20)])
        assert predicted == pytest.approx(empirical, rel=0.08), fixed_tasks


def test_power_options_name_the_field_on_bad_values():
    with pytest.raises(ConfigError, match="report.power"):
        ReportOptions(power=1.5)
    with pytest.raises(ConfigError, match="report.power_delta_pts"):
        ReportOptions(power_delta_pts=0)
    got = ReportOptions.from_config({"report": {"power": 0.9, "power_delta_pts": 2}}).power_options
    assert (got.alpha, got.power, got.delta_pts) == (pytest.approx(0.05), 0.9, 2.0)
    assert got.z == pytest.approx(norm.ppf(0.975) + norm.ppf(0.9))


def test_report_shows_the_planner_for_claims_and_ablation_arms():
    letters = {1: "R", 0: "U"}
    outcomes = {f"t{i:03d}": "".join(letters[int(v)] for v in row) for i, row in enumerate(Y)}
    run = matrix_run("run-p", "swebench_verified", outcomes, model="microsoft/FrogNano-4B-2609")
    content = compute([run, ablation_run()], load_claims(), ReportOptions(bootstrap=50))
    table = next(t for t in content.tables if t.name == "power")
    claim = next(r for r in table.rows if r["kind"] == "claim")
    assert claim["target"] == "61.5 (avg@3)"
    assert claim["power_mdd_pts"] == pytest.approx(100 * Z * math.sqrt(SIGMA_B2 / T + SIGMA_W2 / (T * K)))
    assert claim["power_observed_gap_pts"] == pytest.approx(50.0 - 61.5)
    # 11.5 points with 200 tasks: k = (1/6) / (200 (0.115² / Z² - sigma_b² / 200)) = 0.63 -> 1
    assert claim["power_seeds_for_observed"] == 1
    assert claim["power_seeds_for_delta"] is None  # 3 pts is under the task floor
    assert claim["power_seeds_for_delta_seeds_only"] == 8
    verdicts = next(t for t in content.tables if t.name == "verdicts")
    shown = [r for r in verdicts.rows if r["benchmark"] == "swebench_verified"]
    assert shown[0]["power_mdd_pts"] == claim["power_mdd_pts"]
    arm = next(r for r in table.rows if r["kind"] == "ablation")
    # paired differences parallel - base: t1 00, t2 01, t3 10, t4 11 (BASE/PAR of synth.ablation_run)
    d = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=float)
    within = np.mean([0, 0.5, 0.5, 0])
    means_var = np.var([0, 0.5, 0.5, 1], ddof=1)
    between = means_var - within / 2
    assert arm["power_mdd_pts"] == pytest.approx(100 * Z * math.sqrt(between / 4 + within / 8))
    assert arm["power_observed_gap_pts"] == pytest.approx(100 * d.mean())
    ablation = next(t for t in content.tables if t.name == "ablation")
    assert [r.get("power_mdd_pts") is None for r in ablation.rows] == [True, False]  # baseline: none
    assert power_row(variance_parts(d), 50.0, OPTS).mdd_pts == arm["power_mdd_pts"]
