"""The retried-trials section: how many trials needed more than one agent run, whether they
resolve like first-run trials (two-proportion z-test), and that infra_error attempts, lost ones
included, are counted and shown but never scored."""

from __future__ import annotations

import math

from farm.report.claims import ClaimsRegistry
from farm.report.render import build_report
from farm.report.retries import retry_line, retry_rows, two_proportions
from farm.report.tables import ReportOptions, compute

from .synth import plan_table, run_data, trial

FAST = ReportOptions(bootstrap=50)


def _run(retried_resolved: int):
    """20 tasks × 1 seed: tasks 0-11 first-run (6 resolved), tasks 12-19 re-run after an
    infra_error (task 12's first attempt lost when the driver died), the first
    ``retried_resolved`` of them resolved."""
    tasks = [f"t{i:02d}" for i in range(20)]
    rows = []
    for i, t in enumerate(tasks):
        if i < 12:
            rows.append(trial("r", "b", t, 0, "resolved" if i % 2 == 0 else "unresolved"))
            continue
        first = dict(error_class="attempt_lost") if i == 12 else dict(error_class="sandbox_lost")
        rows.append(trial("r", "b", t, 0, "infra_error", attempt=1, **first))
        rows.append(trial("r", "b", t, 0, "resolved" if i - 12 < retried_resolved else "unresolved",
                          attempt=2))
    # a refused trial (never started an agent) is not an agent run
    rows.append(trial("r", "b", "t19", 0, "infra_error", attempt=0, error_class="task_unsupported:x"))
    return run_data("r", plan_table("r", "b", tasks, [0], ["base"], "m"), rows)


def test_two_proportions_matches_a_hand_computation():
    # 6/12 vs 8/8: pooled 14/20 = 0.7, se = sqrt(0.21 * (1/12 + 1/8)) = 0.20917
    z, p = two_proportions(6, 12, 8, 8)
    assert math.isclose(z, 0.5 / math.sqrt(0.21 * (1 / 12 + 1 / 8)), rel_tol=1e-9)
    assert math.isclose(p, math.erfc(z / math.sqrt(2)), rel_tol=1e-9) and p < 0.05
    assert two_proportions(3, 10, 0, 0) == (None, None)
    assert two_proportions(5, 5, 3, 3) == (0.0, 1.0)


def test_retried_trials_are_counted_and_compared():
    content = compute([_run(8)], ClaimsRegistry(), FAST)
    (row,) = retry_rows(content.groups)
    assert (row.graded, row.retried, row.first_resolved, row.retried_resolved) == (20, 8, 6, 8)
    assert (row.infra_attempts, row.lost_attempts) == (8, 1)  # the refusal is not counted
    line = retry_line(row)
    assert "8 of 20 graded trials needed more than one agent run" in line
    assert "p = 0.0168" in line and "their outcomes differ" in line
    # the score reads the last attempt only: 14 of 20 resolved, infra_error attempts not in it
    (stats,) = content.stats
    assert math.isclose(stats.avg_at_k, 70.0)
    assert [t for t in content.tables if t.name == "retries"]


def test_no_difference_is_said_plainly():
    (row,) = retry_rows(compute([_run(4)], ClaimsRegistry(), FAST).groups)  # 4/8 re-run vs 6/12 first-run
    assert (row.z, row.p) == (0.0, 1.0)
    assert retry_line(row).endswith("(two-proportion z = 0.00, p = 1): no evidence that their outcomes differ")


def test_the_rendered_report_shows_the_section(tmp_path):
    paths = build_report([_run(8)], tmp_path, options=FAST)
    md = paths.markdown.read_text()
    assert "Retried trials" in md and "needed more than one agent run" in md
    assert "retries" in paths.csv


def test_no_section_without_infra_attempts():
    tasks = ["a", "b"]
    run = run_data("r", plan_table("r", "b", tasks, [0], ["base"], "m"),
                   [trial("r", "b", "a", 0, "resolved"), trial("r", "b", "b", 0, "unresolved")])
    content = compute([run], ClaimsRegistry(), FAST)
    assert not [t for t in content.tables if t.name == "retries"]
    assert retry_line(retry_rows(content.groups)[0]) == ""


def test_the_terminal_summary_says_it():
    from rich.console import Console

    from farm.report.summary import summary_table

    console = Console(width=100, record=True)
    console.print(summary_table(_run(8), options=FAST))
    text = " ".join(console.export_text().split())
    assert "re-run trials, b · base: 8 of 20 graded trials needed more than one agent run" in text
    assert "their outcomes differ" in text
