"""`farm diff RUN_A RUN_B`: per-trial same / regrade / rerun, and the paired outcome difference."""

from __future__ import annotations

import csv
import hashlib
import json

import numpy as np
import pytest
import yaml

from farm.cli import main
from farm.report.ablation import mcnemar, paired_difference
from farm.report.data import load_run
from farm.report.diff import decide, diff_runs
from farm.report.stats import BootstrapOptions
from farm.store import ResultStore
from tests.support.demo_runs import SOLVED, TASKS, DemoRuns

from .synth import matrix_run


def _json(demo_runs: DemoRuns, capsys, *extra: str) -> dict:
    capsys.readouterr()
    assert main(["diff", demo_runs.run_a, demo_runs.run_b, "--store", demo_runs.store, "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_decisions_follow_what_changed_in_each_arm(demo_runs: DemoRuns, capsys) -> None:
    out = _json(demo_runs, capsys, "report.bootstrap=400")
    assert out["counts"] == {"same": 2, "regrade": 2, "rerun": 2}
    by_arm = {a["arm"]: a for a in out["arms"]}
    assert {a: by_arm[a]["decisions"] for a in by_arm} == {
        "same": {"same": 2, "regrade": 0, "rerun": 0},
        "regraded": {"same": 0, "regrade": 2, "rerun": 0},
        "changed": {"same": 0, "regrade": 0, "rerun": 2},
    }
    pairs = {(p["arm"], p["task_id"]): p for p in out["pairs"]}
    assert pairs[("regraded", SOLVED)]["changed"] == ["grade.verifier_retries"]
    rerun = pairs[("changed", SOLVED)]["changed"]
    assert {"agent.name", "agent.script", "model.name", "row:policy", "row:model"} <= set(rerun)
    assert not any(k.startswith(("grade.", "experiment", "store.", "run.")) for k in rerun)
    assert out["bootstrap"]["samples"] == 400


def test_paired_statistics_are_the_reports_on_the_cells_both_runs_hold(demo_runs: DemoRuns, capsys) -> None:
    out = _json(demo_runs, capsys)
    changed = next(a for a in out["arms"] if a["arm"] == "changed")
    # A: the scripted agent solves SOLVED only; B: the oracle solves both
    assert (changed["rate_a"], changed["rate_b"], changed["flipped"]) == (50.0, 100.0, 1)
    store = ResultStore.open(demo_runs.store, create=False)
    rows = {r: {t["task_id"]: t["status"] == "resolved" for t in store.read_trials(r).to_pylist()
                if t["arm"] == "changed"} for r in (demo_runs.run_a, demo_runs.run_b)}
    ok_a = np.array([[rows[demo_runs.run_a][t]] for t in sorted(TASKS)])
    ok_b = np.array([[rows[demo_runs.run_b][t]] for t in sorted(TASKS)])
    assert (changed["delta_pts"], changed["delta_ci_low"], changed["delta_ci_high"]) == \
        paired_difference(ok_a, ok_b, BootstrapOptions())
    assert (changed["mcnemar_b"], changed["mcnemar_c"], changed["mcnemar_p"]) == mcnemar(ok_a, ok_b)
    same = next(a for a in out["arms"] if a["arm"] == "same")
    # no task changed: not [0, 0] but the Wilson bound of 0 disagreements in len(TASKS) tasks
    bound = 100 * 1.959963984540054 ** 2 / (len(TASKS) + 1.959963984540054 ** 2)
    assert (same["delta_pts"], same["flipped"]) == (0.0, 0)
    assert (same["delta_ci_low"], same["delta_ci_high"]) == pytest.approx((-bound, bound))


def test_terminal_table_prints_counts_reasons_and_the_difference(demo_runs: DemoRuns, capsys) -> None:
    assert main(["diff", demo_runs.run_a, demo_runs.run_b, "--store", demo_runs.store]) == 0
    text = capsys.readouterr().out
    assert "same 2, regrade 2, rerun 2" in text
    assert "regrade: grade.verifier_retries (2)" in text and "agent.name (2)" in text
    flips = [line.strip() for line in text.splitlines() if line.strip().startswith("flipped")]
    assert flips == ["flipped (rerun): builtin term-dedupe-inbox seed 0 arm changed: unresolved -> resolved"]
    changed = next(line for line in text.splitlines() if line.strip().startswith("builtin") and "changed" in line)
    assert "50.0" in changed and "100.0" in changed and "0/1" in changed


def test_a_run_against_itself_is_all_same_and_the_reverse_diff_negates(demo_runs: DemoRuns) -> None:
    store = ResultStore.open(demo_runs.store, create=False)
    a, b = load_run(store, demo_runs.run_a), load_run(store, demo_runs.run_b)
    fast = BootstrapOptions(samples=300)
    itself = diff_runs(a, a, fast)
    assert itself.counts == {"same": 6, "regrade": 0, "rerun": 0}
    assert all(x.delta_pts == 0.0 and x.flipped == 0 for x in itself.arms)
    forward, backward = diff_runs(a, b, fast), diff_runs(b, a, fast)
    assert [p.decision for p in forward.pairs] == [p.decision for p in backward.pairs]
    assert {x.arm: x.delta_pts for x in forward.arms} == {x.arm: -x.delta_pts or 0.0 for x in backward.arms}


def test_only_cells_both_runs_hold_are_paired() -> None:
    a = matrix_run("a", "b1", {"t1": "RR", "t2": "UU", "t3": "RU", "t4": "RR"})
    b = matrix_run("b", "b1", {"t1": "RU", "t2": "UR", "t3": "RU", "t4": "R."})  # t4 seed 1 missing in B
    d = diff_runs(a, b, BootstrapOptions(samples=300))
    (arm,) = d.arms
    assert (arm.pairs, arm.only_a, arm.only_b, arm.n_tasks, arm.k) == (7, 1, 0, 3, 2)
    assert (arm.flipped, arm.rate_a, arm.rate_b) == (2, 50.0, 50.0)  # t4 is left out of both rates
    assert arm.delta_pts == 0.0 and arm.delta_ci_low <= 0.0 <= arm.delta_ci_high


def test_rows_that_ran_differently_are_reruns_whatever_the_config_says() -> None:
    cfg = {"agent.name": "leaf", "grade.mode": "in_place"}
    row = {"policy": "leaf", "model": "frognano-4b", "config_hash": "h1"}
    assert decide(row, dict(row), cfg, dict(cfg)) == ("same", [])
    assert decide(row, {**row, "model": "qwen3.5-4b"}, cfg, dict(cfg)) == ("rerun", ["row:model"])
    assert decide(row, {**row, "model": None}, cfg, dict(cfg)) == ("same", [])  # no answer: nothing to compare
    # the same file names in both configs, another content in one of them
    for column in ("agent_script_sha256", "system_prompt_sha256", "tools_sha256"):
        assert decide({**row, column: "aa"}, {**row, column: "bb"}, cfg, dict(cfg)) == ("rerun", [f"row:{column}"])
    assert decide(row, dict(row), cfg, {**cfg, "grade.mode": "fresh"}) == ("regrade", ["grade.mode"])
    # a stored config that no longer loads: the rows' config hashes decide
    assert decide(row, dict(row), None, None) == ("same", [])
    assert decide(row, {**row, "config_hash": "h2"}, None, None) == ("rerun", ["config_hash"])


def test_unknown_run_is_one_line_naming_it(demo_runs: DemoRuns, capsys) -> None:
    assert main(["diff", demo_runs.run_a, "no-such-run", "--store", demo_runs.store]) == 2
    assert "no-such-run" in capsys.readouterr().err


def test_report_with_a_second_run_has_the_diff_section(demo_runs: DemoRuns, tmp_path) -> None:
    out = tmp_path / "report"
    assert main(["report", demo_runs.run_a, "--compare", demo_runs.run_b, "--store", demo_runs.store,
                 "--out", str(out), "report.bootstrap=200"]) == 0
    html = (out / "report.html").read_text()
    assert f"Run diff: {demo_runs.run_b} against {demo_runs.run_a}" in html
    rows = {r["arm"]: r for r in csv.DictReader((out / "run_diff.csv").open())}
    assert set(rows) == {"same", "regraded", "changed"}
    assert (rows["changed"]["n_rerun"], rows["changed"]["delta_pts"], rows["changed"]["run_id"]) == \
        ("2", "50.0", demo_runs.run_b)
    single = tmp_path / "single"
    assert main(["report", demo_runs.run_a, "--store", demo_runs.store, "--out", str(single),
                 "report.bootstrap=200"]) == 0
    assert not (single / "run_diff.csv").exists()


def test_a_script_changed_under_the_same_path_is_a_rerun(tmp_path, capsys) -> None:
    """Two real runs of the scripted policy with one agent.script path: the file's content differs."""
    script = tmp_path / "policy.yaml"
    store = str(tmp_path / "store")
    digests = []
    for run_id, reply in (("script-a", "I give up."), ("script-b", "I still give up.")):
        script.write_text(yaml.safe_dump({"*": [{"content": reply}]}))
        digests.append(hashlib.sha256(script.read_bytes()).hexdigest())
        assert main(["run", "-q", "agent=scripted", f"agent.script={script}", "model.name=scripted",
                     "benchmark.task_ids=[term-dedupe-inbox]", "run.executor=local", f"store.uri={store}",
                     f"run.id={run_id}", "run.preflight=false", "report.bootstrap=50"]) == 0
    rows = {r: ResultStore.open(store, create=False).read_trials(r).to_pylist() for r in ("script-a", "script-b")}
    assert [rows["script-a"][0]["agent_script_sha256"], rows["script-b"][0]["agent_script_sha256"]] == digests
    capsys.readouterr()
    assert main(["diff", "script-a", "script-b", "--store", store, "--json", "report.bootstrap=50"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counts"] == {"same": 0, "regrade": 0, "rerun": 1}
    assert out["pairs"][0]["changed"] == ["row:agent_script_sha256"]
