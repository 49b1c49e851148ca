"""Statistics against hand-computed values on small synthetic tables."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from farm.report.claims import Claim
from farm.report.data import outcome_groups
from farm.report.stats import BootstrapOptions, bootstrap_ratio, group_stats, pass_at_k
from farm.report.verdicts import judge

from .synth import matrix_run, plan_table, run_data, trial

OPTS = BootstrapOptions(samples=2000, seed=0)

# t1 RRU, t2 UUU, t3 R I R, t4 R . R  (I = infra_error, . = missing)
K3 = {"t1": "RRU", "t2": "UUU", "t3": "RIR", "t4": "R.R"}


def stats_of(run, **kw):
    (group,) = outcome_groups(run)
    return group_stats(group, kw.get("opts", OPTS))


def test_k3_with_missing_and_infra_matches_hand_computation():
    s = stats_of(matrix_run("r", "b", K3))
    assert (s.n_tasks, s.k, s.scheduled) == (4, 3, 12)
    # seed 0: t1,t3,t4 resolved = 3/4; seed 1: t1 only = 1/4; seed 2: t3,t4 = 2/4
    assert s.per_seed == pytest.approx([75.0, 25.0, 50.0])
    assert s.avg_at_k == pytest.approx(50.0)
    # graded-only: the infra error and the missing trial leave the denominator: 6 / 10
    assert s.graded == 10
    assert s.graded_rate == pytest.approx(60.0)
    assert s.graded_per_seed == pytest.approx([75.0, 50.0, 50.0])  # seed 1: t1 R, t2 U graded
    # pass@k per task (n=3): c = 2,0,2,2
    assert s.pass_at[1] == pytest.approx(50.0)
    assert s.pass_at[2] == pytest.approx(100 * (1 + 0 + 1 + 1) / 4)  # 1 - C(1,2)/C(3,2) = 1
    assert s.pass_at[3] == pytest.approx(75.0)
    # flips over graded seeds only: t1 flips; t3 (R,R) and t4 (R,R) do not
    assert s.flip_rate == pytest.approx(25.0)
    assert s.counts == {"resolved": 6, "unresolved": 4, "model_error": 0, "infra_error": 1, "missing": 1}
    assert s.error_classes == {("infra_error", "-", "infrastructure"): 1}
    assert s.ci_low <= s.avg_at_k <= s.ci_high


def test_k1_rates_and_undefined_flip_rate():
    s = stats_of(matrix_run("r", "b", {"a": "R", "b": "U", "c": "I", "d": ".", "e": "M"}))
    assert s.k == 1
    assert s.per_seed == [pytest.approx(20.0)]
    assert s.avg_at_k == pytest.approx(20.0)
    assert s.graded_rate == pytest.approx(100 / 3)  # model_error stays in: 1 of R, U, M
    assert s.pass_at == {1: pytest.approx(20.0)}
    assert math.isnan(s.flip_rate)


def test_model_error_is_a_failure_in_both_denominators():
    s = stats_of(matrix_run("r", "b", {"a": "RM", "b": "MM"}))
    assert s.avg_at_k == pytest.approx(25.0)
    assert s.graded_rate == pytest.approx(25.0)


@pytest.mark.parametrize(
    "n,c,k,expected",
    [(5, 2, 2, 1 - 3 / 10), (5, 0, 3, 0.0), (5, 5, 1, 1.0), (3, 1, 3, 1.0), (4, 2, 3, 1.0), (10, 3, 5, 1 - 21 / 252)],
)
def test_pass_at_k_unbiased_estimator(n, c, k, expected):
    assert pass_at_k(np.array([n]), np.array([c]), k) == pytest.approx(100 * expected)


def test_pass_at_k_skips_tasks_with_fewer_samples_than_k():
    assert pass_at_k(np.array([1, 3]), np.array([1, 0]), 2) == pytest.approx(0.0)
    assert math.isnan(pass_at_k(np.array([1]), np.array([1]), 2))


def test_latest_attempt_wins_regardless_of_row_order():
    rows = [
        trial("r", "b", "t1", 0, "resolved", attempt=2),
        trial("r", "b", "t1", 0, "infra_error", attempt=1),
        trial("r", "b", "t2", 0, "infra_error", attempt=1),
        trial("r", "b", "t2", 0, "unresolved", attempt=3),
        trial("r", "b", "t2", 0, "infra_error", attempt=2),
    ]
    s = stats_of(run_data("r", plan_table("r", "b", ["t1", "t2"], [0], ["base"], "m"), rows))
    assert s.counts["resolved"] == 1 and s.counts["unresolved"] == 1 and s.counts["infra_error"] == 0


def test_trials_outside_the_plan_and_an_empty_plan_are_still_counted():
    rows = [trial("r", "b", "t1", 0, "resolved"), trial("r", "b", "t2", 0, "unresolved")]
    s = stats_of(run_data("r", plan_table("r", "b", [], [], [], "m"), rows))
    assert (s.n_tasks, s.avg_at_k) == (2, pytest.approx(50.0))


def test_avg_at_k_denominator_is_every_task_of_the_benchmark_across_arms():
    # arm "x" only ran t1; t2 was planned for arm "base" only: both arms divide by 2 tasks.
    plan = plan_table("r", "b", ["t1", "t2"], [0], ["base"], "m")
    rows = [trial("r", "b", "t1", 0, "resolved", arm="x"), trial("r", "b", "t1", 0, "resolved")]
    groups = {g.arm: group_stats(g, OPTS) for g in outcome_groups(run_data("r", plan, rows))}
    assert groups["x"].avg_at_k == pytest.approx(50.0) and groups["x"].counts["missing"] == 1
    assert groups["base"].avg_at_k == pytest.approx(50.0)


def test_bootstrap_is_seeded_and_reproducible():
    run = matrix_run("r", "b", K3)
    a, b = stats_of(run), stats_of(run)
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)
    other = stats_of(run, opts=BootstrapOptions(samples=2000, seed=1))
    big = np.random.default_rng(5).random((60, 3)) < 0.4
    ci0 = bootstrap_ratio(big.astype(float), np.ones((60, 3)), BootstrapOptions(seed=0))
    ci1 = bootstrap_ratio(big.astype(float), np.ones((60, 3)), BootstrapOptions(seed=1))
    assert ci0 == bootstrap_ratio(big.astype(float), np.ones((60, 3)), BootstrapOptions(seed=0))
    assert ci0 != ci1
    assert other.ci_low <= other.avg_at_k <= other.ci_high


def test_all_equal_outcomes_get_the_wilson_interval_not_a_point():
    # every resample of an all-resolved (or all-failed) table is the same, so the percentile
    # bootstrap says [100, 100]; Wilson with n = tasks, by hand: z²/(n+z²) = 3.8415/5.8415
    z2 = 1.959963984540054 ** 2
    s = stats_of(matrix_run("r", "b", {"a": "RRR", "b": "RRR"}))
    assert s.ci_low == pytest.approx(100 * 2 / (2 + z2)) and s.ci_high == pytest.approx(100.0)
    assert s.flip_rate == 0.0
    none = stats_of(matrix_run("r", "b", {f"t{i:02d}": "U" for i in range(14)}))  # 0 of 14, k = 1
    assert none.ci_low == pytest.approx(0.0) and none.ci_high == pytest.approx(100 * z2 / (14 + z2))
    assert none.ci_high == pytest.approx(21.53, abs=0.01)
    # graded-only: an infra error leaves its task out, so n = 13 tasks with a graded cell
    infra = stats_of(matrix_run("r", "b", {**{f"t{i:02d}": "U" for i in range(13)}, "t13": "I"}))
    assert infra.graded_ci_high == pytest.approx(100 * z2 / (13 + z2))
    # and a claim of 20 % is not refuted by 14 failures
    assert judge(_claim(20.0, "avg@1"), none).verdict == "reproduced"


def test_bootstrap_width_matches_the_binomial_standard_error():
    # k=1, n=400, p=0.5: SE = sqrt(.25/400) = 2.5 pts, 95% half-width ~ 4.9 pts
    ok = np.zeros((400, 1))
    ok[:200] = 1
    lo, hi = bootstrap_ratio(ok, np.ones_like(ok), BootstrapOptions(samples=4000))
    assert (hi - lo) / 2 == pytest.approx(1.96 * 2.5, rel=0.15)


def test_within_task_seed_resampling_widens_the_interval():
    # Every task resolved on exactly one of three seeds: a task-only bootstrap sees no variance
    # (every task mean is 1/3); resampling seeds inside tasks does.
    ok = np.zeros((200, 3))
    ok[:, 0] = 1
    lo, hi = bootstrap_ratio(ok, np.ones_like(ok), OPTS)
    assert lo < 100 / 3 < hi and hi - lo > 3.0


def _claim(value: float, metric: str = "avg@3") -> Claim:
    return Claim(model="m", benchmark="b", value=value, metric=metric, source="test")


def test_verdicts_reproduced_below_above_with_inclusive_bounds():
    full = {f"t{i}": "RRU" if i % 2 else "UUU" for i in range(20)}
    s = stats_of(matrix_run("r", "b", full))
    assert s.avg_at_k == pytest.approx(100 / 3)
    assert judge(_claim(s.avg_at_k), s).verdict == "reproduced"
    # a claim exactly on the CI bound is inside (tie)
    assert judge(_claim(s.ci_high), s).verdict == "reproduced"
    assert judge(_claim(s.ci_low), s).verdict == "reproduced"
    below = judge(_claim(61.5), s)
    assert below.verdict == "below" and below.text == f"below by {61.5 - 100 / 3:.1f} pts"
    above = judge(_claim(5.0), s)
    assert above.verdict == "above" and above.delta_pts == pytest.approx(100 / 3 - 5.0)
    assert judge(_claim(30.0, "avg@1"), s).note == "claim is avg@1, measured avg@3"


def test_verdict_incomplete_over_threshold_is_configurable():
    s = stats_of(matrix_run("r", "b", K3))  # 2 of 12 infra/missing = 16.7 %
    assert judge(_claim(50.0), s).verdict == "incomplete"
    assert judge(_claim(50.0), s, incomplete_threshold=0.2).verdict == "reproduced"
    # exactly at the threshold is still complete
    assert judge(_claim(50.0), s, incomplete_threshold=2 / 12).verdict == "reproduced"
    assert judge(_claim(50.0), dataclasses.replace(s, ci_low=math.nan), 0.5).verdict == "incomplete"


def test_equal_attempts_tie_break_on_finished_at_like_the_store():
    rows = [
        trial("r", "b", "t1", 0, "resolved", attempt=1, finished_at=200.0),
        trial("r", "b", "t1", 0, "infra_error", attempt=1, finished_at=100.0),
    ]
    s = stats_of(run_data("r", plan_table("r", "b", ["t1"], [0], ["base"], "m"), rows))
    assert s.counts["resolved"] == 1 and s.counts["infra_error"] == 0
