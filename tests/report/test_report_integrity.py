"""farm/report/integrity.py: the clean Avg@k, flags per rule and re-graded trials."""

from __future__ import annotations

import math

from farm.report.integrity import integrity_line, integrity_rows
from farm.report.stats import BootstrapOptions

from .synth import plan_table, run_data, trial

FAST = BootstrapOptions(samples=200)


def test_clean_score_counts_flagged_resolved_trials_as_unresolved() -> None:
    plan = plan_table("r", "b", ["t1", "t2", "t3", "t4"], [0, 1], ["base"], "m")
    rows = [
        trial("r", "b", "t1", 0, "resolved"), trial("r", "b", "t1", 1, "resolved"),
        trial("r", "b", "t2", 0, "resolved", hack_flags=["git_history@3", "git_history@5"]),
        trial("r", "b", "t2", 1, "resolved", hack_flags=["read_tests@2", "git_history@1"]),
        trial("r", "b", "t3", 0, "unresolved", hack_flags=["upstream_fetch@4"]),
        trial("r", "b", "t3", 1, "unresolved"),
        trial("r", "b", "t4", 0, "resolved"), trial("r", "b", "t4", 1, "infra_error"),
    ]
    (row,) = integrity_rows(run_data("r", plan, rows), FAST)
    assert row.avg_at_k == 100 * 5 / 8 and row.clean_avg_at_k == 100 * 3 / 8
    assert (row.flagged, row.flagged_resolved) == (3, 2)
    # a trial counts once per rule, however many steps matched it
    assert row.by_rule == {"git_history": 2, "read_tests": 1, "upstream_fetch": 1}
    lo, hi = row.clean_ci
    assert not math.isnan(lo) and lo <= row.clean_avg_at_k <= hi
    line = integrity_line(row)
    assert line.startswith("b · base · m: clean Avg@k 37.5 % (CI ")
    assert "vs 62.5 %: 3 trials flagged (git_history=2, read_tests=1, upstream_fetch=1), " \
           "2 of them resolved" in line


def test_regraded_rows_are_counted_with_the_verdicts_they_changed_and_only_latest_attempts_count() -> None:
    plan = plan_table("r", "b", ["t1", "t2", "t3"], [0], ["base"], "m")
    rows = [
        trial("r", "b", "t1", 0, "infra_error", error_class="verifier_setup"),
        trial("r", "b", "t1", 0, "resolved", attempt=2, regraded_from="uid-1", original_status="infra_error"),
        trial("r", "b", "t2", 0, "unresolved", attempt=2, regraded_from="uid-2", original_status="unresolved"),
        # an old flagged attempt that a retry replaced is not in the latest attempts
        trial("r", "b", "t3", 0, "infra_error", hack_flags=["read_tests@1"]),
        trial("r", "b", "t3", 0, "resolved", attempt=2),
    ]
    (row,) = integrity_rows(run_data("r", plan, rows), FAST)
    assert (row.regraded, row.regrade_changed, row.flagged) == (2, 1, 0)
    assert row.clean_avg_at_k == row.avg_at_k
    assert integrity_line(row) == "b · base · m: 2 trials re-graded by `farm regrade`, 1 verdicts changed"


def test_a_tamper_suspect_from_dual_grading_is_taken_out_of_the_clean_score() -> None:
    plan = plan_table("r", "b", ["t1", "t2"], [0], ["base"], "m")
    rows = [trial("r", "b", "t1", 0, "resolved", tamper_suspect=True, fresh_status="unresolved"),
            trial("r", "b", "t2", 0, "resolved", tamper_suspect=False, fresh_status="resolved")]
    (row,) = integrity_rows(run_data("r", plan, rows), FAST)
    assert (row.avg_at_k, row.clean_avg_at_k, row.by_rule) == (100.0, 50.0, {"tamper_suspect": 1})


def test_nothing_to_say_is_an_empty_line() -> None:
    plan = plan_table("r", "b", ["t1"], [0], ["base"], "m")
    (row,) = integrity_rows(run_data("r", plan, [trial("r", "b", "t1", 0, "resolved")]), FAST)
    assert not row.relevant and integrity_line(row) == ""


def test_the_report_gets_an_integrity_section_only_when_there_is_something_to_say(tmp_path) -> None:
    from farm.report import build_report
    from farm.report.tables import ReportOptions

    plan = plan_table("r", "b", ["t1", "t2"], [0], ["base"], "m")
    flagged = run_data("r", plan, [trial("r", "b", "t1", 0, "resolved", hack_flags=["git_history@2"]),
                                   trial("r", "b", "t2", 0, "resolved")])
    paths = build_report([flagged], tmp_path / "a", options=ReportOptions(bootstrap=50))
    md = paths.markdown.read_text()
    assert "## Integrity: clean score and re-grades" in md
    assert "| b | base | m | 100.0 | 50.0 |" in md and "git_history=1" in md
    csv_text = (tmp_path / "a" / "integrity.csv").read_text()
    assert csv_text.splitlines()[0].split(",")[:5] == ["run_id", "config_hash", "benchmark", "arm", "model"]
    clean = run_data("r", plan, [trial("r", "b", "t1", 0, "resolved"), trial("r", "b", "t2", 0, "resolved")])
    assert "Integrity" not in build_report([clean], tmp_path / "b", options=ReportOptions(bootstrap=50)).markdown \
        .read_text()
