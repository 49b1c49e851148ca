"""The report header says which tool rules (agent.compat) the trials ran under."""

from __future__ import annotations

from farm.report import build_report
from farm.report.prompt_line import tool_rules_line
from farm.report.tables import ReportOptions

from .synth import matrix_run, plan_table, run_data, trial


def test_farm_safe_runs_are_marked_in_both_outputs(tmp_path):
    run = matrix_run("safe", "b", {"a": "R", "b": "U"}, agent_compat="farm-safe")
    paths = build_report([run], tmp_path, options=ReportOptions(bootstrap=50))
    line = next(x for x in paths.markdown.read_text().splitlines() if x.startswith("Tool rules:"))
    assert "agent.compat=farm-safe" in line and "do not reproduce the vendor's harness" in line
    assert line.replace("'", "&#x27;") in paths.html.read_text()


def test_arms_under_different_rules_are_named_and_old_rows_are_counted():
    plan = plan_table("r", "b", ["t"], [0], ["new", "old"], "m")
    rows = [trial("r", "b", "t", 0, "resolved", arm="new", agent_compat="leaf-2609"),
            trial("r", "b", "t", 0, "resolved", arm="old", agent_compat="leaf-legacy"),
            trial("r", "b", "u", 0, "resolved", arm="old")]  # stored before the column existed
    line = tool_rules_line([run_data("r", plan, rows)])
    assert "newest transport (agent.compat=leaf-2609) in arm new" in line
    assert "umask 022 (agent.compat=leaf-legacy) in arm old" in line
    assert line.endswith("not recorded for 1 trial row(s) (stored before farm recorded it).")
