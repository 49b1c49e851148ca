"""The ablation comparison part by part: arms, baselines, paired cells, turn counts and means."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from farm.report import ablation as ab
from farm.report.data import outcome_groups
from farm.report.stats import BootstrapOptions, group_stats
from farm.store.schema import STEPS_SCHEMA, StepRow, to_table

from .synth import plan_table, run_data, trial

OPTS = BootstrapOptions(samples=200, seed=0)


def rows_of(run):
    groups = outcome_groups(run)
    return ab.ablation_rows(run, groups, [group_stats(g, OPTS) for g in groups], OPTS)


def test_arm_specs_skip_malformed_entries_and_render_overrides():
    run = run_data("r", plan_table("r", "b", [], [], [], "m"), [], arms=[
        "not a mapping", {"overrides": ["x=1"]},  # skipped, and the ones after still count
        {"name": "a", "overrides": {"agent.max_steps": 5, "model.temperature": 0.1}},
        {"name": "b", "overrides": ["x=1", "y=2"]},
        {"name": "c"},
    ])
    assert ab.arm_specs(run) == [("a", "agent.max_steps=5 model.temperature=0.1"), ("b", "x=1 y=2"), ("c", "")]
    assert ab.arm_specs(run_data("r", plan_table("r", "b", [], [], [], "m"), [])) == []


def test_majority_is_strictly_more_than_half():
    ok = np.array([[1, 0], [1, 1], [0, 0]], bool)
    assert ab.majority(ok).tolist() == [False, True, False]
    ok3 = np.array([[1, 1, 0], [1, 0, 0]], bool)
    assert ab.majority(ok3).tolist() == [True, False]


def test_paired_difference_of_one_cell_and_of_none():
    z2 = 1.959963984540054 ** 2
    one = ab.paired_difference(np.array([[False]]), np.array([[True]]), OPTS)
    # one task, the arm wins: the bootstrap is a point, so Wilson of 1 disagreement in 1 task
    assert one == pytest.approx((100.0, 100 / (1 + z2), 100.0))
    # 14 tasks, the arms agree on all (0 vs 0): not [0, 0] but ± z²/(n+z²) = ±21.5 points
    same = ab.paired_difference(np.zeros((14, 1), bool), np.zeros((14, 1), bool), OPTS)
    assert same == pytest.approx((0.0, -100 * z2 / (14 + z2), 100 * z2 / (14 + z2)))
    lost = ab.paired_difference(np.ones((14, 2), bool), np.zeros((14, 2), bool), OPTS)
    assert lost == pytest.approx((-100.0, -100.0, -100 * 14 / (14 + z2)))
    empty = ab.paired_difference(np.zeros((0, 2), bool), np.zeros((0, 2), bool), OPTS)
    assert all(math.isnan(v) for v in empty)
    assert ab.paired_difference(np.array([[True, True]]), np.array([[False, True]]), OPTS)[0] == -50.0


def _steps(*rows: tuple[str, int, int | None]) -> pa.Table:
    table = to_table([StepRow("r", k, a, i, n_tool_calls=n or 0) for i, (k, a, n) in enumerate(rows)], STEPS_SCHEMA)
    nulls = [n is None for _, _, n in rows]
    if any(nulls):
        col = pa.array([None if z else r[2] for z, r in zip(nulls, rows)], pa.int64())
        table = table.set_column(table.schema.get_field_index("n_tool_calls"), "n_tool_calls", col)
    return table


def test_tool_turns_from_trial_counts_and_from_steps():
    trials = [
        {"trial_key": "a", "attempt": 1, "tool_calling_turns": 4, "parallel_call_turns": None},  # no parallel count
        {"trial_key": "b", "attempt": 2, "tool_calling_turns": None},  # counted from its steps
        {"trial_key": "c", "attempt": 1, "tool_calling_turns": None},  # no steps either: nothing
    ]
    steps = _steps(("b", 2, 3), ("b", 2, 2), ("b", 2, 1), ("b", 2, 0), ("b", 2, None), ("b", 1, 5))
    assert ab.tool_turns(trials, steps) == (4 + 3, 2)
    assert ab.tool_turns(trials, None) == (4, 0)
    assert ab.tool_turns(trials, _steps(("b", 2, 2))) == (5, 1)  # a one-row steps table counts
    assert ab.tool_turns([], None) == (0, 0)


def test_mean_skips_trials_without_the_columns_and_sums_the_present_ones():
    trials = [{"steps": None, "a": None, "b": None}, {"steps": 3, "a": 10, "b": None}, {"steps": 5, "a": 1, "b": 2}]
    assert ab._mean(trials, "steps") == 4.0
    assert ab._mean(trials, "a", "b") == (10 + 3) / 2
    assert math.isnan(ab._mean([{"steps": None}], "steps"))


def _run_two_benchmarks():
    rows = []
    for bench, arms in (("aa-single", ["base"]), ("b", ["zeta", "alpha", "baseline"])):
        for arm in arms:
            for task in ("t1", "t2"):
                st = "resolved" if (arm == "alpha" or task == "t1") else "unresolved"
                rows.append(trial("r", bench, task, 0, st, arm=arm, steps=2, wall_s=1.0,
                                  tool_calling_turns=0 if arm == "zeta" else 2, parallel_call_turns=1))
    plan = pa.concat_tables([plan_table("r", "aa-single", ["t1", "t2"], [0], ["base"], "m"),
                             plan_table("r", "b", ["t1", "t2"], [0], ["zeta", "alpha", "baseline"], "m")])
    return rows, plan


def test_rows_per_benchmark_with_undeclared_arms_baseline_first_then_by_name():
    rows, plan = _run_two_benchmarks()
    run = run_data("r", plan, rows)
    out = rows_of(run)
    # the single-arm benchmark has no comparison; the other one is still compared
    assert [(r.benchmark, r.arm, r.is_baseline) for r in out] == [
        ("b", "baseline", True), ("b", "alpha", False), ("b", "zeta", False)]
    base, alpha, zeta = out
    assert (alpha.run_id, alpha.config_hash, alpha.n_tasks, alpha.k, alpha.trials) == ("r", "cfg-r", 2, 1, 2)
    assert alpha.overrides == "" and alpha.resolve_rate == 100.0 and base.resolve_rate == 50.0
    assert alpha.delta_pts == 50.0 and (alpha.mcnemar_b, alpha.mcnemar_c) == (0, 1)
    st = {g.arm: group_stats(g, OPTS) for g in outcome_groups(run) if g.benchmark == "b"}
    assert (alpha.ci_low, alpha.ci_high) == (st["alpha"].ci_low, st["alpha"].ci_high)
    assert math.isnan(zeta.parallel_rate) and zeta.tool_calling_turns == 0
    assert alpha.parallel_rate == 50.0 and (alpha.steps_mean, alpha.wall_s_mean) == (2.0, 1.0)


@pytest.mark.parametrize("name", ["base", "baseline"])
def test_base_or_baseline_leads_when_nothing_is_declared(name):
    rows = [trial("r", "b", "t", 0, "resolved", arm=a) for a in ("aaa", name)]
    run = run_data("r", plan_table("r", "b", ["t"], [0], ["aaa", name], "m"), rows)
    assert [r.arm for r in rows_of(run)] == [name, "aaa"]


def test_declared_order_wins_and_names_the_baseline():
    arms = [{"name": "zz", "overrides": ["a=1"]}, {"name": "base", "overrides": []}]
    rows = [trial("r", "b", "t", 0, "resolved", arm=a) for a in ("base", "zz", "extra")]
    run = run_data("r", plan_table("r", "b", ["t"], [0], ["base", "zz", "extra"], "m"), rows, arms=arms)
    out = rows_of(run)
    assert [(r.arm, r.is_baseline, r.overrides) for r in out] == [("zz", True, "a=1"), ("base", False, ""),
                                                                  ("extra", False, "")]


@pytest.mark.parametrize(("baseline", "lo", "hi", "verdict"), [
    (True, 0.0, 0.0, "baseline"),
    (False, 2.0, 30.0, "better"),
    (False, -30.0, -0.5, "worse"),
    (False, -10.0, 12.0, "no detectable difference"),
    (False, 0.0, 12.0, "no detectable difference"),  # a bound on 0 does not exclude it
    (False, math.nan, math.nan, "no data"),
])
def test_the_paired_verdict_reads_the_difference_ci(baseline, lo, hi, verdict):
    row = ab.ArmRow("r", "h", "b", "arm", "", baseline, 14, 1, 50.0, 0.0, 100.0, (lo + hi) / 2, lo, hi,
                    0, 0, 1.0, 0, 0, math.nan, 0.0, 0.0, 0.0, 14)
    assert row.verdict == verdict
