"""The statistics functions one by one, on matrices small enough to compute by hand."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from farm.report import stats as st
from farm.report.data import outcome_groups

from .synth import matrix_run, plan_table, run_data, trial

OPTS = st.BootstrapOptions(samples=500, seed=0)


@pytest.fixture(autouse=True)
def no_numpy_warnings():
    """An empty denominator gives NaN explicitly, never through a 0/0 warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def test_per_seed_rates_with_and_without_a_mask():
    ok = np.array([[1, 0], [0, 0], [1, 1]], bool)
    assert st.per_seed_rates(ok) == pytest.approx([200 / 3, 100 / 3])
    mask = np.array([[1, 0], [1, 0], [0, 0]], bool)
    rates = st.per_seed_rates(ok, mask)
    assert rates[0] == 50.0 and math.isnan(rates[1])


def test_avg_at_k_and_pooled_rate_edge_cases():
    assert st.avg_at_k(np.array([[True]])) == 100.0
    assert st.avg_at_k(np.array([[False]])) == 0.0
    assert math.isnan(st.avg_at_k(np.zeros((0, 3), bool)))
    ok = np.array([[1, 1], [0, 1]], bool)
    assert st.pooled_rate(ok, np.array([[1, 0], [1, 1]], bool)) == pytest.approx(200 / 3)
    assert math.isnan(st.pooled_rate(ok, np.zeros_like(ok)))


def test_pass_at_k_with_no_task_having_enough_samples_is_nan():
    assert math.isnan(st.pass_at_k(np.array([1, 1]), np.array([1, 0]), 2))
    assert math.isnan(st.pass_at_k(np.array([], int), np.array([], int), 1))


def test_flip_rate_skips_tasks_with_fewer_than_two_graded_seeds():
    ok = np.array([[1, 0], [1, 0], [1, 1]], bool)
    mask = np.array([[1, 0], [1, 1], [1, 1]], bool)  # task 0 has one graded seed: it cannot flip
    assert st.flip_rate(ok, mask) == 50.0
    assert math.isnan(st.flip_rate(ok, np.zeros_like(ok)))


def test_bootstrap_of_no_tasks_or_no_seeds_is_undefined():
    for shape in ((0, 3), (3, 0), (0, 0)):
        lo, hi = st.bootstrap_ratio(np.zeros(shape), np.ones(shape), OPTS)
        assert math.isnan(lo) and math.isnan(hi)


def test_bootstrap_of_one_task():
    lo, hi = st.bootstrap_ratio(np.array([[1.0, 0.0]]), np.ones((1, 2)), OPTS)
    assert 0.0 <= lo <= 50.0 <= hi <= 100.0 and lo < hi


@pytest.mark.parametrize("samples", [1, 10, 251, 600])
def test_bootstrap_sample_counts_below_at_and_above_the_chunk(samples):
    ok = (np.arange(40) % 2).reshape(20, 2).astype(float)
    lo, hi = st.bootstrap_ratio(ok, np.ones_like(ok), st.BootstrapOptions(samples=samples, seed=0))
    assert 0.0 <= lo <= hi <= 100.0
    if samples == 1:
        assert lo == hi


def test_resamples_without_graded_cells_are_left_out():
    # one graded (and resolved) cell among 20 tasks: most resamples contain no graded cell at all;
    # those have no rate and must not count as 0 %
    num = np.zeros((20, 1))
    den = np.zeros((20, 1))
    num[0, 0] = den[0, 0] = 1.0
    assert st.bootstrap_ratio(num, den, OPTS) == (100.0, 100.0)
    assert all(math.isnan(v) for v in st.bootstrap_ratio(np.zeros((3, 1)), np.zeros((3, 1)), OPTS))


def test_percentile_ci_level():
    values = np.arange(101, dtype=float)
    assert st._percentile_ci(values, 0.9) == pytest.approx((5.0, 95.0))
    assert st._percentile_ci(np.array([np.nan, 1.0, np.nan]), 0.95) == (1.0, 1.0)


def test_group_stats_uses_the_given_options_and_fills_every_field():
    run = matrix_run("r9", "b", {"t1": "RU", "t2": "UI", "t3": "RR", "t4": "U."})
    (group,) = outcome_groups(run)
    opts = st.BootstrapOptions(samples=300, seed=7, level=0.8)
    s = st.group_stats(group, opts)
    assert (s.run_id, s.config_hash, s.benchmark, s.arm, s.model) == ("r9", "cfg-r9", "b", "base", "m")
    assert s.seeds == [0, 1] and (s.n_tasks, s.k, s.scheduled) == (4, 2, 8)
    ok = group.resolved
    assert (s.ci_low, s.ci_high) == st.bootstrap_ratio(ok.astype(float), np.ones(ok.shape), opts)
    graded = group.graded
    assert (s.graded_ci_low, s.graded_ci_high) == st.bootstrap_ratio(
        (ok & graded).astype(float), graded.astype(float), opts)
    assert s.graded_ci_low <= s.graded_rate <= s.graded_ci_high and s.graded_ci_high < 100.0
    default = st.group_stats(group)
    assert (default.ci_low, default.ci_high) == st.bootstrap_ratio(ok.astype(float), np.ones(ok.shape),
                                                                 st.BootstrapOptions())


def test_error_classes_count_every_non_plain_outcome():
    rows = [
        trial("r", "b", "t1", 0, "infra_error", error_class="sandbox_start"),
        trial("r", "b", "t2", 0, "infra_error", error_class="sandbox_start"),
        trial("r", "b", "t3", 0, "unresolved", error_class="verifier_timeout"),
        trial("r", "b", "t4", 0, "resolved"),
        trial("r", "b", "t5", 0, "model_error"),
    ]
    run = run_data("r", plan_table("r", "b", ["t1", "t2", "t3", "t4", "t5"], [0], ["base"], "m"), rows)
    (group,) = outcome_groups(run)
    assert st.group_stats(group, OPTS).error_classes == {
        ("infra_error", "sandbox_start", "infrastructure"): 2, ("unresolved", "verifier_timeout", "model"): 1,
        ("model_error", "-", "model"): 1}
