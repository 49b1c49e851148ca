"""Ablation comparison and cost against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from farm.report.ablation import mcnemar, paired_difference
from farm.report.claims import ClaimsRegistry
from farm.report.cost import cost_rows
from farm.report.data import outcome_groups
from farm.report.stats import BootstrapOptions
from farm.report.tables import ReportOptions, compute

from .synth import ablation_run, plan_table, run_data, trial


def test_ablation_rows_match_hand_computation():
    content = compute([ablation_run()], ClaimsRegistry(), ReportOptions())
    base, par = content.ablation
    assert base.is_baseline and base.arm == "base" and par.arm == "parallel"
    assert par.overrides == "model.parallel_tool_calls=true agent.tool_execution=concurrent"
    assert base.resolve_rate == pytest.approx(100 * 3 / 8)
    assert par.resolve_rate == pytest.approx(100 * 7 / 8)
    assert par.delta_pts == pytest.approx(50.0)
    assert base.delta_pts == 0.0 and base.delta_ci_low == 0.0 and base.delta_ci_high == 0.0
    assert par.delta_ci_low <= 50.0 <= par.delta_ci_high
    assert par.delta_ci_low > 0  # every task moved up or stayed: no resample can go negative
    # per-task majority (strictly more than half of the seeds): base resolves t1 only (t2 is a
    # tie), parallel resolves t1, t2, t4 (t3 is a tie) -> b=0, c=2, exact p = 2 * 0.5^2
    assert (par.mcnemar_b, par.mcnemar_c) == (0, 2)
    assert par.mcnemar_p == pytest.approx(0.5)
    assert (base.tool_calling_turns, base.parallel_call_turns) == (80, 8)
    assert base.parallel_rate == pytest.approx(10.0)
    assert (par.tool_calling_turns, par.parallel_call_turns) == (16, 8)
    assert par.parallel_rate == pytest.approx(50.0)
    assert (base.steps_mean, base.tokens_mean, base.wall_s_mean) == (10, 1100, 60.0)
    assert (par.steps_mean, par.tokens_mean, par.wall_s_mean) == (3, 550, 30.0)


def test_mcnemar_exact_p_values():
    base = np.zeros((10, 1), bool)
    arm = np.zeros((10, 1), bool)
    arm[:5] = True
    assert mcnemar(base, arm) == (0, 5, pytest.approx(2 * 0.5**5))
    base[5:8] = True
    # b=3, c=5: two-sided binomial p of 5 successes in 8 trials = 2 * P(X>=5) = 0.7265625
    assert mcnemar(base, arm) == (3, 5, pytest.approx(0.7265625))
    assert mcnemar(base, base) == (0, 0, 1.0)


def test_paired_difference_uses_the_same_resamples_for_both_arms():
    rng = np.random.default_rng(3)
    base = rng.random((50, 3)) < 0.5
    arm = base.copy()
    arm[:2, 0] = ~arm[:2, 0]  # two of 150 cells differ
    d, lo, hi = paired_difference(base, arm, BootstrapOptions())
    # resampling the pairs together leaves only the two differing cells to vary: a few points
    # wide; resampling each arm on its own would give ~±20 points around two ~50 % rates
    assert lo <= d <= hi and hi - lo < 6.0


def test_cost_per_trial_and_per_resolved_counts_retried_attempts():
    rows = [
        trial("r", "b", "t1", 0, "infra_error", attempt=1, prompt_tokens=100, cached_tokens=0,
              completion_tokens=10, llm_s=1.0, sandbox_cpu_s=2.0),
        trial("r", "b", "t1", 0, "resolved", attempt=2, prompt_tokens=300, cached_tokens=100,
              completion_tokens=30, llm_s=3.0, sandbox_cpu_s=4.0),
        trial("r", "b", "t2", 0, "unresolved", prompt_tokens=200, cached_tokens=50, completion_tokens=20,
              llm_s=4.0, sandbox_cpu_s=6.0),
    ]
    run = run_data("r", plan_table("r", "b", ["t1", "t2"], [0], ["base"], "m"), rows)
    run.meta["gpu_seconds"] = 80.0
    (c,) = cost_rows(run, outcome_groups(run))
    assert (c.trials, c.attempts, c.resolved) == (2, 3, 1)
    assert c.totals["prompt_tokens"] == 600 and c.totals["cached_tokens"] == 150
    assert c.per_trial["prompt_tokens"] == 300 and c.per_resolved["prompt_tokens"] == 600
    assert c.per_trial["completion_tokens"] == 30
    assert c.per_resolved["llm_s"] == 8.0 and c.per_trial["sandbox_cpu_s"] == 6.0
    assert c.totals["gpu_s"] == 80.0 and c.per_resolved["gpu_s"] == 80.0
    run.meta.pop("gpu_seconds")
    (c,) = cost_rows(run, outcome_groups(run))
    assert math.isnan(c.totals["gpu_s"])


def test_gpu_seconds_are_split_by_llm_seconds():
    rows = [trial("r", "b", "t1", 0, "resolved", llm_s=1.0), trial("r", "b", "t1", 0, "resolved", arm="x", llm_s=3.0)]
    plan = plan_table("r", "b", ["t1"], [0], ["base", "x"], "m")
    run = run_data("r", plan, rows)
    run.meta["gpu_seconds"] = 100.0
    by_arm = {c.arm: c.totals["gpu_s"] for c in cost_rows(run, outcome_groups(run))}
    assert by_arm == {"base": 25.0, "x": 75.0}


def test_prefix_cache_hit_rate_counts_only_attempts_whose_server_reported_both():
    rows = [
        trial("r", "b", "t1", 0, "resolved", prompt_tokens=300, cached_tokens=100),
        trial("r", "b", "t2", 0, "unresolved", prompt_tokens=100, cached_tokens=50),
        # an endpoint that does not report cached_tokens: unknown, so it must not count as 0 hits
        trial("r", "b", "t3", 0, "unresolved", prompt_tokens=600, cached_tokens=None),
    ]
    run = run_data("r", plan_table("r", "b", ["t1", "t2", "t3"], [0], ["base"], "m"), rows)
    (c,) = cost_rows(run, outcome_groups(run))
    assert c.prefix_cache_hit_rate == pytest.approx(150 / 400)
    none = run_data("r", plan_table("r", "b", ["t3"], [0], ["base"], "m"), rows[2:])
    (c,) = cost_rows(none, outcome_groups(none))
    assert math.isnan(c.prefix_cache_hit_rate)
