"""experiment=tb2-timeouts end to end (and an arm limited to one benchmark, as reproduce-frognano's
TB2 timeout arm is, at the end): the same tasks under their own agent timeout (1x) and four
times it (4x), with real parts (Harbor tasks, bubblewrap sandboxes, the oracle policy over HTTP,
the Leaf loop, the Harbor verifier, the Parquet store) and the report read from the store alone.

Task ``slow``'s solution sleeps 5 s under a 3 s agent timeout: the oracle's Bash call is cut at
the limit at 1x and finishes at 4x (12 s), so its verdict must differ between the arms; ``quick``
(30 s, room for a loaded machine) passes under both."""

from __future__ import annotations

import asyncio
import csv
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from farm.cli import main
from farm.config import conf_dir, load_config
from farm.run.driver import run_experiment
from farm.store import ResultStore
from farm.tasks.harbor import load_harbor_dir
from tests.support.tasks import CHECK_ANSWER, make_task_dir

AGENT_TIMEOUT_S = 3


def _task(root: Path, name: str, solve: str, timeout_s: float = AGENT_TIMEOUT_S) -> None:
    d = make_task_dir(root, name, CHECK_ANSWER, solve)
    old = (d / "task.toml").read_text()
    toml = old.replace("[agent]\ntimeout_sec = 60", f"[agent]\ntimeout_sec = {timeout_s}")
    assert toml != old
    (d / "task.toml").write_text(toml)


@pytest.mark.integration
def test_the_report_shows_both_verdicts_and_that_the_slow_task_differs(tmp_path: Path, monkeypatch) -> None:
    # the real experiment file, its Terminal-Bench budget dropped (the run's benchmark is the two
    # tasks below, and a budget for a benchmark the run does not hold is refused)
    conf = tmp_path / "conf"
    shutil.copytree(conf_dir(), conf)
    exp_file = conf / "experiment" / "tb2-timeouts.yaml"
    exp = yaml.safe_load(exp_file.read_text())
    assert [a["overrides"] for a in exp["experiment"]["arms"]] == [["agent.timeout_multiplier=1"],
                                                                  ["agent.timeout_multiplier=4"]]
    del exp["experiment"]["per_benchmark"]
    exp_file.write_text(yaml.safe_dump(exp))
    monkeypatch.setenv("FARM_CONF_DIR", str(conf))
    tasks = tmp_path / "tasks"
    _task(tasks, "slow", "sleep 5\necho fixed > /app/answer.txt\n")
    _task(tasks, "quick", "echo fixed > /app/answer.txt\n", timeout_s=30)
    store = tmp_path / "store"
    # the oracle stands in for the model
    assert main(["run", "-q", "experiment=tb2-timeouts", "experiment.benchmarks=[]", f"benchmark.path={tasks}",
                 "agent=oracle", "agent.tokenizer=bytes", "run.executor=local", f"store.uri={store}",
                 "run.seeds=1", "run.max_attempts=1", "run.max_in_flight=4"]) == 0
    (run_id,) = ResultStore.open(str(store)).list_runs()
    rows = {(r["arm"], r["task_id"]): r for r in ResultStore.open(str(store)).read_trials(run_id).to_pylist()}
    assert rows[("timeouts-1x", "slow")]["exit_reason"] == "max_time"
    assert rows[("timeouts-1x", "slow")]["status"] == "unresolved"
    assert {k: r["status"] for k, r in rows.items() if k != ("timeouts-1x", "slow")} == {
        ("timeouts-4x", "slow"): "resolved", ("timeouts-1x", "quick"): "resolved", ("timeouts-4x", "quick"): "resolved"}
    assert {k: (r["timeout_multiplier"], r["agent_budget_s"]) for k, r in rows.items()} == {
        ("timeouts-1x", "slow"): (1.0, AGENT_TIMEOUT_S), ("timeouts-4x", "slow"): (4.0, 4 * AGENT_TIMEOUT_S),
        ("timeouts-1x", "quick"): (1.0, 30), ("timeouts-4x", "quick"): (4.0, 120)}

    out = tmp_path / "report"
    assert main(["report", run_id, "--store", str(store), "--out", str(out)]) == 0
    with (out / "timeout_tasks.csv").open() as f:
        by_task = {r["task_id"]: r for r in csv.DictReader(f)}
    assert {t: (r["low_verdict"], r["high_verdict"], r["differ"]) for t, r in by_task.items()} == {
        "slow": ("fail", "pass", "True"), "quick": ("pass", "pass", "False")}
    with (out / "timeouts.csv").open() as f:
        (pair,) = list(csv.DictReader(f))
    assert (pair["low_arm"], pair["high_arm"], pair["n_tasks"], pair["n_differ"]) == ("timeouts-1x", "timeouts-4x",
                                                                                      "2", "1")
    assert (pair["pass_only_high"], pair["pass_only_low"], pair["low_max_time_trials"]) == ("1", "0", "1")
    md = (out / "report.md").read_text()
    assert "## Timeout sensitivity" in md and "## Timeout sensitivity by task" in md
    (slow_line,) = [line for line in md.splitlines() if line.startswith("| ") and " slow " in line]
    assert "fail (0/1) at 1x" in slow_line and "pass (1/1) at 4x" in slow_line and "| yes |" in slow_line
    assert ("the verdict differs on 1 of 2 tasks (1 pass only at 4x, 0 only at 1x; all pass only at 4x)"
            in md)


@pytest.mark.parametrize("extra,budget", [([], 3.0), (["agent.timeout_multiplier=4"], 12.0),
                                          (["agent.max_total_time_s=30", "agent.timeout_multiplier=4"], 120.0)])
def test_the_sandbox_is_sized_for_the_whole_budget(tmp_path: Path, extra: list[str], budget: float) -> None:
    """A sandbox's lifetime (a pod's activeDeadlineSeconds) is sized from the task's agent timeout:
    the task the sandbox is opened with carries the multiplied budget, and the agent is not given
    the multiplier a second time."""
    from farm.run.plan import TrialSpec
    from farm.run.trial import run_trial

    _task(tmp_path / "tasks", "slow", "true\n")
    (task,) = load_harbor_dir(tmp_path / "tasks", "builtin")
    cfg = load_config([f"benchmark.path={tmp_path / 'tasks'}", f"store.uri={tmp_path / 'store'}", *extra])
    opened = []

    def factory(task, *args, **kwargs):
        opened.append(task)
        raise KeyError("stop here")

    spec = TrialSpec("run", "k" * 64, task.benchmark, task.task_id, 0, "base", "oracle")
    out = asyncio.run(run_trial(spec, task, cfg, 1, base_url="http://127.0.0.1:9/v1", policy="oracle",
                                sandbox_factory=factory))
    assert out.result.error_class == "internal_error" and task.agent_timeout_s == AGENT_TIMEOUT_S
    assert [t.agent_timeout_s for t in opened] == [budget]


@pytest.mark.integration
def test_an_arm_limited_to_one_benchmark_runs_there_only_and_pairs_there(tmp_path: Path, capsys) -> None:
    """Two benchmarks in one run and a 4x arm limited to one of them (``benchmarks``, ``strict``
    as reproduce-frognano's frognano-4b-timeouts-4x): the plan and the rows hold the arm on that
    benchmark alone, and the report pairs it with the unlimited 1x arm there."""
    root = tmp_path / "tasks"
    _task(root, "slow", "sleep 5\necho fixed > /app/answer.txt\n")
    _task(root, "quick", "echo fixed > /app/answer.txt\n", timeout_s=30)
    loaded = {t.task_id: t for t in load_harbor_dir(root, "builtin")}
    tasks = [replace(loaded["quick"], benchmark="alpha"), replace(loaded["slow"], benchmark="beta")]
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"experiment": {"benchmarks": ["alpha", "beta"], "strict_pair": False, "arms": [
        {"name": "agent"},
        {"name": "agent-4x", "overrides": ["agent.timeout_multiplier=4"], "benchmarks": ["beta"], "strict": False}]}}))
    store = tmp_path / "store"
    cfg = load_config(["agent=oracle", "agent.tokenizer=bytes", "run.executor=local", f"store.uri={store}",
                       "run.seeds=1", "run.max_attempts=1", "run.max_in_flight=4", "run.progress=false",
                       f"sandbox.local.root_dir={tmp_path / 'sandboxes'}"], config_file=exp)
    summary = asyncio.run(run_experiment(cfg, tasks=tasks))
    rs = ResultStore.open(str(store))
    planned = sorted((p["arm"], p["benchmark"], p["task_id"]) for p in rs.read_plan(summary.run_id).to_pylist())
    assert planned == [("agent", "alpha", "quick"), ("agent", "beta", "slow"), ("agent-4x", "beta", "slow")]
    rows = {(r["arm"], r["task_id"]): r for r in rs.read_trials(summary.run_id).to_pylist()}
    assert {k: (r["status"], r["timeout_multiplier"]) for k, r in rows.items()} == {
        ("agent", "quick"): ("resolved", 1.0), ("agent", "slow"): ("unresolved", 1.0),
        ("agent-4x", "slow"): ("resolved", 4.0)}

    out = tmp_path / "report"
    assert main(["report", summary.run_id, "--store", str(store), "--out", str(out)]) == 0
    with (out / "timeouts.csv").open() as f:
        (pair,) = list(csv.DictReader(f))
    assert (pair["benchmark"], pair["low_arm"], pair["high_arm"], pair["n_tasks"], pair["n_differ"]) == (
        "beta", "agent", "agent-4x", "1", "1")

    # `farm plan` with this run as the pilot counts the arm where it runs only: 10 tasks of alpha
    # with one arm, 10 of beta with two (not 2 arms x 20 tasks)
    plan = tmp_path / "plan.yaml"
    plan.write_text("run: {benchmarks: {alpha: 10, beta: 10}, seeds: 1, max_in_flight: 4}\n"
                    "sensitivity: {enabled: false}\n")
    capsys.readouterr()
    assert main(["plan", summary.run_id, "--store", str(store), "--plan", str(plan), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["base"]["trials"] == 10 * 1 + 10 * 2
