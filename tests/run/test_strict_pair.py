"""Standard and strict in one run, through the real loop: a scripted agent over HTTP, bubblewrap,
the Harbor verifier, and a real "upstream" HTTP server on the host's loopback that serves the fix.

The standard arm gives the agent the network (``benchmark.agent_network=public`` with
``sandbox.local.public_network=host``: the host's own network, loopback included), so the agent
fetches the fix, applies it and resolves the task; the hack scan flags the fetch and the report
counts the pass as leaked. Its ``-strict`` twin runs with no network (bubblewrap's own network
namespace: the host's loopback is not there), so the same fetch fails and the task stays
unresolved."""

from __future__ import annotations

import asyncio
import csv
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from farm.config import load_config
from farm.report.data import load_run
from farm.report.render import build_report
from farm.report.tables import ReportOptions
from farm.run.driver import run_experiment
from farm.store import ResultStore
from tests.support.tasks import CHECK_ANSWER, make_task_dir
from tests.support.upstream import serve_upstream

pytestmark = pytest.mark.bwrap


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 (a free port) serving the task's fix as fix.patch."""
    with serve_upstream(tmp_path / "upstream") as url:
        yield url


def _base(tmp_path: Path, script: Path) -> list[str]:
    return [f"benchmark.path={tmp_path / 'tasks'}", "run.executor=local", f"store.uri={tmp_path / 'store'}",
            f"sandbox.local.root_dir={tmp_path / 'sb'}", "run.progress=false", "agent=scripted",
            f"agent.script={script}", "run.max_attempts=1"]


def test_the_upstream_fix_resolves_in_standard_is_counted_as_leakage_and_fails_in_strict(
        tmp_path: Path, upstream: str) -> None:
    make_task_dir(tmp_path / "tasks", "leaky", CHECK_ANSWER)  # the task itself says no-network
    script = tmp_path / "fetch.yaml"
    fetch = f"cd /app && curl -sSf --max-time 10 {upstream} -o /tmp/fix.patch && git apply /tmp/fix.patch"
    script.write_text(yaml.safe_dump([{"tool_calls": [{"name": "Bash", "arguments": {"command": fetch}}]},
                                      {"content": "done"}]))
    # standard: the vendor's setting, agent (and verifier) on the network
    cfg = load_config([*_base(tmp_path, script), "experiment.strict_pair=true", "sandbox.local.public_network=host",
                       "benchmark.agent_network=public", "benchmark.verifier_network=public"])
    summary = asyncio.run(run_experiment(cfg))
    store = ResultStore.open(str(tmp_path / "store"))
    rows = {r["arm"]: r for r in store.read_trials(summary.run_id).to_pylist()}
    assert set(rows) == {"base", "base-strict"}
    std, strict = rows["base"], rows["base-strict"]

    assert std["status"] == "resolved", std["error"]
    assert (std["agent_network"], std["grading_mode"]) == ("public", "in_place")
    assert any(f.startswith("upstream_fetch@") for f in std["hack_flags"])

    assert strict["status"] == "unresolved", strict["error"]
    assert (strict["agent_network"], strict["verifier_network"]) == ("no-network", "no-network")
    assert strict["history_refs_removed"] is not None  # strict strips the history of every task
    assert strict["config_hash"] != std["config_hash"]
    # it failed because the upstream was out of reach, not for some other reason
    steps = store.read_steps(summary.run_id).to_pylist()
    (strict_step,) = [s for s in steps if s["trial_key"] == strict["trial_key"] and "curl" in s["messages_json"]]
    assert "Couldn't connect" in strict_step["messages_json"] or "curl: (7)" in strict_step["messages_json"]

    paths = build_report([load_run(store, summary.run_id)], tmp_path / "report", options=ReportOptions(bootstrap=200))
    with paths.csv["strict"].open() as f:
        (row,) = list(csv.DictReader(f))
    assert (row["arm"], row["standard_passes"], row["leaked_passes"]) == ("base", "1", "1")
    assert float(row["standard_avg_at_k"]) == 100.0 and float(row["strict_avg_at_k"]) == 0.0
    assert float(row["delta"]) == -100.0 and float(row["leakage_per_1000"]) == 1000.0
    assert row["causes"] == "upstream_fetch=1"
    assert "Standard and strict" in paths.markdown.read_text()


DUAL_DOCKERFILE = ("FROM python:3.11-slim\nWORKDIR /app\n"
                   "RUN git init -q && printf 'out/\\n' > .gitignore && git add -A && "
                   "git -c user.name=t -c user.email=t@example.invalid commit -qm init\n")
CHECK_OUT = ("#!/bin/bash\nif grep -qx fixed /app/out/result.txt; then echo 1; else echo 0; fi "
             "> /logs/verifier/reward.txt\n")


def test_with_tamper_fails_a_tamper_suspect_is_graded_unresolved(tmp_path: Path) -> None:
    # the answer sits in an ignored file: resolved where the agent worked, not from its patch
    task = make_task_dir(tmp_path / "tasks", "dual", CHECK_OUT)
    (task / "environment" / "Dockerfile").write_text(DUAL_DOCKERFILE)
    script = tmp_path / "agent.yaml"
    call = {"name": "Bash", "arguments": {"command": "cd /app && mkdir -p out && echo fixed > out/result.txt"}}
    script.write_text(yaml.safe_dump([{"tool_calls": [call]}, {"content": "done"}]))
    cfg = load_config([*_base(tmp_path, script), "grade.mode=both", "grade.tamper_fails=true"])
    summary = asyncio.run(run_experiment(cfg))
    (row,) = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id).to_pylist()
    assert row["tamper_suspect"] is True and row["fresh_status"] == "unresolved"
    assert (row["status"], row["reward"]) == ("unresolved", 1.0), row["error"]  # the in-place reward stays on record
