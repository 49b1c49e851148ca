"""farm/report/strict.py: standard beside strict, the paired difference and the leakage rate."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from farm.report.data import outcome_groups
from farm.report.render import build_report
from farm.report.stats import BootstrapOptions, group_stats
from farm.report.strict import strict_rows
from farm.report.tables import ReportOptions

from .synth import matrix_run, plan_table, run_data, trial

FAST = BootstrapOptions(samples=300)
TASKS = ["t1", "t2", "t3", "t4", "t5"]


def _pair_run():
    """Standard passes 8 of 10 cells, 3 of them by an upstream fetch, a history read or a tamper
    suspect; the strict twin passes 5 (t1 and t4 on both seeds, t3 on seed 1)."""
    plan = plan_table("r", "swe", TASKS, [0, 1], ["a", "a-strict"], "m")
    std = {("t1", 0): ("resolved", {}), ("t1", 1): ("resolved", {}),
           ("t2", 0): ("resolved", {"hack_flags": ["upstream_fetch@3", "upstream_fetch@4"]}),
           ("t2", 1): ("resolved", {"hack_flags": ["git_history@2", "read_tests@5"]}),
           ("t3", 0): ("resolved", {"tamper_suspect": True, "fresh_status": "unresolved"}),
           ("t3", 1): ("resolved", {"hack_flags": ["read_tests@1"]}),  # not a leak: the fix was not looked up
           ("t4", 0): ("resolved", {}), ("t4", 1): ("resolved", {}),
           ("t5", 0): ("unresolved", {"hack_flags": ["upstream_fetch@1"]}),  # a failed lookup is no pass
           ("t5", 1): ("unresolved", {})}
    strict = {("t1", 0): "resolved", ("t1", 1): "resolved", ("t2", 0): "unresolved", ("t2", 1): "unresolved",
              ("t3", 0): "unresolved", ("t3", 1): "resolved", ("t4", 0): "resolved", ("t4", 1): "resolved",
              ("t5", 0): "unresolved", ("t5", 1): "unresolved"}
    rows = [trial("r", "swe", t, s, st, arm="a", **extra) for (t, s), (st, extra) in std.items()]
    rows += [trial("r", "swe", t, s, st, arm="a-strict") for (t, s), st in strict.items()]
    return run_data("r", plan, rows, arms=[{"name": "a", "overrides": []}])


def test_strict_row_pairs_the_twin_and_counts_leaked_passes_per_thousand() -> None:
    run = _pair_run()
    groups = outcome_groups(run)
    (row,) = strict_rows(groups, [group_stats(g, FAST) for g in groups], FAST)
    assert (row.benchmark, row.arm, row.model) == ("swe", "a", "m")
    assert row.standard == 80.0 and row.strict == 50.0
    assert row.delta == -30.0
    lo, hi = row.delta_ci
    assert lo < -30.0 < hi <= 0  # no cell moved up: the CI reaches no further than zero
    assert (row.passes, row.leaked) == (8, 3)
    assert row.by_cause == {"upstream_fetch": 1, "git_history": 1, "tamper_suspect": 1}
    assert row.leakage_per_1000 == 375.0
    assert row.standard_ci[0] <= 80.0 <= row.standard_ci[1] and row.strict_ci[0] <= 50.0 <= row.strict_ci[1]


def test_the_report_writes_strict_csv_and_shows_the_table(tmp_path: Path) -> None:
    paths = build_report([_pair_run()], tmp_path / "out", options=ReportOptions(bootstrap=300))
    with paths.csv["strict"].open() as f:
        (row,) = list(csv.DictReader(f))
    assert (row["arm"], row["standard_passes"], row["leaked_passes"]) == ("a", "8", "3")
    assert float(row["leakage_per_1000"]) == 375.0 and float(row["delta"]) == -30.0
    assert 0 < float(row["leakage_ci_low"]) < 375.0 < float(row["leakage_ci_high"]) < 1000
    md = paths.markdown.read_text()
    assert "Standard and strict" in md and "375 (3 of 8)" in md
    assert "Standard and strict" in paths.html.read_text()


def test_a_run_without_twins_has_no_strict_table(tmp_path: Path) -> None:
    run = matrix_run("plain", "swe", {"t1": "RU", "t2": "RR"})
    groups = outcome_groups(run)
    assert strict_rows(groups, [group_stats(g, FAST) for g in groups], FAST) == []
    paths = build_report([run], tmp_path / "out", options=ReportOptions(bootstrap=300))
    assert "strict" not in paths.csv and "Standard and strict" not in paths.markdown.read_text()


def test_no_standard_passes_gives_no_leakage_rate() -> None:
    plan = plan_table("r", "b", ["t1"], [0], ["a", "a-strict"], "m")
    run = run_data("r", plan, [trial("r", "b", "t1", 0, "unresolved", arm="a"),
                               trial("r", "b", "t1", 0, "unresolved", arm="a-strict")])
    groups = outcome_groups(run)
    (row,) = strict_rows(groups, [group_stats(g, FAST) for g in groups], FAST)
    assert row.passes == 0 and math.isnan(row.leakage_per_1000) and row.delta == 0.0
