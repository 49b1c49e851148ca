"""farm/report/timeouts.py: which arms form a timeout pair, and what the pair's tables say."""

from __future__ import annotations

from pathlib import Path

from farm.config import load_config
from farm.config.load import to_dict
from farm.report.data import outcome_groups
from farm.report.render import build_report
from farm.report.stats import BootstrapOptions
from farm.report.tables import ReportOptions
from farm.report.timeouts import timeout_pairs

from .synth import plan_table, run_data, trial

FAST = BootstrapOptions(samples=200)
ARMS = [
    {"name": "t1x", "overrides": ["model=x", "agent.timeout_multiplier=1"]},
    {"name": "t4x", "overrides": ["model=x", "agent.timeout_multiplier=4"]},
    # another setting as well as another multiplier: not the same arm at two budgets
    {"name": "safe4x", "overrides": ["model=x", "agent.compat=farm-safe", "agent.timeout_multiplier=4"]},
]
# per arm: task -> one letter per seed (R resolved, U unresolved, T unresolved at max_time, I infra)
OUTCOMES = {
    "t1x": {"a": "RR", "b": "TT", "c": "RT", "d": "RR", "e": "II"},
    "t4x": {"a": "RR", "b": "RR", "c": "RR", "d": "UU", "e": "RR"},
    "safe4x": {"a": "UU", "b": "UU", "c": "UU", "d": "UU", "e": "UU"},
}


def _run(arms=ARMS, outcomes=OUTCOMES, multipliers=None, bench="tb2", **config):
    multipliers = multipliers or {"t1x": 1.0, "t4x": 4.0, "safe4x": 4.0}
    tasks = sorted(next(iter(outcomes.values())))
    names = list(outcomes)
    rows = []
    for arm, table in outcomes.items():
        for task, letters in table.items():
            for seed, ch in enumerate(letters):
                status = {"R": "resolved", "U": "unresolved", "T": "unresolved", "I": "infra_error"}[ch]
                m = multipliers[arm]
                rows.append(trial("r", bench, task, seed, status, arm=arm, timeout_multiplier=m,
                                  agent_budget_s=None if m is None else 900.0 * m,
                                  exit_reason="max_time" if ch == "T" else "agent"))
    return run_data("r", plan_table("r", bench, tasks, [0, 1], names, "m"), rows, arms=arms, **config)


def test_the_pair_is_the_same_arm_at_two_multipliers() -> None:
    run = _run()
    (pair,) = timeout_pairs(run, outcome_groups(run), FAST)
    assert (pair.low_arm, pair.high_arm, pair.low_multiplier, pair.high_multiplier) == ("t1x", "t4x", 1.0, 4.0)
    assert (pair.low_budget_s, pair.high_budget_s) == (900.0, 3600.0)
    by_task = {t.task_id: t for t in pair.tasks}
    # c: one seed of two resolved at 1x is not a majority, so the task fails there
    assert {t: (v.low, v.high, v.differ) for t, v in by_task.items()} == {
        "a": ("pass", "pass", False), "b": ("fail", "pass", True), "c": ("fail", "pass", True),
        "d": ("pass", "fail", True), "e": ("not graded", "pass", None)}
    assert (by_task["b"].low_max_time, by_task["c"].low_max_time, by_task["c"].low_passes) == (2, 1, "1/2")
    assert (pair.n_tasks, pair.n_differ, pair.only_high, pair.only_low) == (5, 3, 3, 1)
    assert pair.summary.endswith("the verdict differs on 3 of 5 tasks (3 pass only at 4x, 1 only at 1x; both ways)")


def test_rows_before_the_column_count_as_1x_and_strict_twins_pair_with_twins() -> None:
    outcomes = {"t1x": {"a": "UU"}, "t4x": {"a": "RR"}, "t1x-strict": {"a": "UU"}, "t4x-strict": {"a": "UU"}}
    run = _run(ARMS[:2], outcomes, {"t1x": None, "t4x": 4.0, "t1x-strict": 1.0, "t4x-strict": 4.0})
    run.config["experiment"]["strict_pair"] = True
    pairs = timeout_pairs(run, outcome_groups(run), FAST)
    assert [(p.low_arm, p.high_arm, p.n_differ) for p in pairs] == [("t1x", "t4x", 1), ("t1x-strict", "t4x-strict", 0)]
    assert pairs[1].summary.endswith("(0 pass only at 4x, 0 only at 1x; no verdict changes)")


def test_no_pair_no_tables(tmp_path: Path) -> None:
    one_multiplier = {"t1x": 1.0, "t4x": 1.0, "safe4x": 1.0}
    run = _run(multipliers=one_multiplier)
    assert timeout_pairs(run, outcome_groups(run), FAST) == []
    paths = build_report([run], tmp_path / "out", options=ReportOptions(bootstrap=200))
    assert "timeouts" not in paths.csv and "Timeout sensitivity" not in paths.markdown.read_text()


def test_the_report_shows_both_verdicts_per_task(tmp_path: Path) -> None:
    paths = build_report([_run()], tmp_path / "out", options=ReportOptions(bootstrap=200))
    md = paths.markdown.read_text()
    lines = {line.split(" | ")[1]: line for line in md.split("## Timeout sensitivity by task")[1].splitlines()
             if line.startswith("| tb2 | ")}
    assert "| fail (0/2) at 1x | pass (2/2) at 4x | yes | 2 / 0 |" in lines["b"]
    assert "| not graded (0/2) at 1x | pass (2/2) at 4x | – |" in lines["e"]
    assert "the verdict differs on 3 of 5 tasks" in md
    assert {"timeouts", "timeout_tasks"} <= set(paths.csv)
    assert "Timeout sensitivity" in paths.html.read_text()


def test_reproduce_frognanos_tb2_timeout_arm_pairs_with_frognano_4b(tmp_path: Path) -> None:
    """The experiment as shipped: arm frognano-4b (1x, every benchmark, with a strict twin) and
    frognano-4b-timeouts-4x (its overrides plus agent.timeout_multiplier=4, TB2 only, no twin) are
    one pair on Terminal-Bench; the card arm (same model, another budget) and the strict twin
    (no 4x partner) are not part of it."""
    cfg = load_config(["experiment=reproduce-frognano", "model.base_url=http://127.0.0.1:9/v1"])
    exp = to_dict(cfg)["experiment"]  # what run.json holds, and the report reads
    outcomes = {"frognano-4b": {"a": "RR", "b": "TT", "c": "UU"},
                "frognano-4b-timeouts-4x": {"a": "RR", "b": "RR", "c": "UU"},
                "frognano-4b-card": {"a": "UU", "b": "UU", "c": "RR"},
                "frognano-4b-strict": {"a": "RR", "b": "UU", "c": "UU"}}
    multipliers = {arm: 4.0 if arm.endswith("-4x") else 1.0 for arm in outcomes}
    run = _run(exp["arms"], outcomes, multipliers, bench="terminal_bench_2_verified", experiment=exp)
    (pair,) = timeout_pairs(run, outcome_groups(run), FAST)
    assert (pair.low_arm, pair.high_arm, pair.benchmark) == ("frognano-4b", "frognano-4b-timeouts-4x",
                                                             "terminal_bench_2_verified")
    paths = build_report([run], tmp_path / "out", options=ReportOptions(bootstrap=200))
    md = paths.markdown.read_text()
    summary, by_task = md.split("## Timeout sensitivity", 1)[1].split("## Timeout sensitivity by task")
    assert ("terminal_bench_2_verified frognano-4b (1x) vs frognano-4b-timeouts-4x (4x): the verdict differs on "
            "1 of 3 tasks (1 pass only at 4x, 0 only at 1x; all pass only at 4x)") in summary
    lines = {line.split(" | ")[1]: line for line in by_task.splitlines() if line.startswith("| terminal_bench_2")}
    assert "| pass (2/2) at 1x | pass (2/2) at 4x | no |" in lines["a"]
    assert "| fail (0/2) at 1x | pass (2/2) at 4x | yes | 2 / 0 |" in lines["b"]
    assert "| fail (0/2) at 1x | fail (0/2) at 4x | no |" in lines["c"]
