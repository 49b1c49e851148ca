"""Hostile agents against in-place grading, through the real loop: a scripted policy over HTTP,
bubblewrap, the Harbor verifier. None of them solves the task (the answer stays wrong); each
tries to make the verifier's reward say otherwise. Every one must end unresolved."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from farm.config import load_config
from farm.run.driver import run_experiment
from farm.store import ResultStore
from tests.support.tasks import make_task_dir as make_task

pytestmark = pytest.mark.bwrap

# the verifier's own Python writes the reward: the place an import hook would strike
CHECK_PY = """import pathlib
ok = pathlib.Path("/app/answer.txt").read_text().strip() == "fixed" if pathlib.Path("/app/answer.txt").exists() \\
    else False
pathlib.Path("/logs/verifier/reward.txt").write_text("1" if ok else "0")
"""
TEST_SH = "#!/bin/bash\npython3 /tests/check.py\nsleep 1\n"

ATTACKS = {
    "writes_the_reward": "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt",
    "symlinked_reward_dir": ("mkdir -p /tmp/fake && echo '{\"reward\": 1}' > /tmp/fake/reward.json && "
                             "rm -rf /logs/verifier && ln -s /tmp/fake /logs/verifier"),
    "leftover_daemon": ("setsid nohup sh -c 'while true; do mkdir -p /logs/verifier; "
                        "echo 1 > /logs/verifier/reward.txt; sleep 0.02; done' >/dev/null 2>&1 < /dev/null &"),
    "user_site_import_hook": (
        "d=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p \"$d\" && "
        "echo \"import atexit; atexit.register(lambda: open('/logs/verifier/reward.txt', 'w').write('1'))\" "
        "> \"$d/zz_spoof.pth\" && python3 -c 'import sys; print(sys.flags.no_user_site)'"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_spoofing_agent_is_never_resolved(tmp_path: Path, attack: str) -> None:
    task = make_task(tmp_path / "tasks", "spoof-me", TEST_SH)
    (task / "tests" / "check.py").write_text(CHECK_PY)
    script = tmp_path / "attack.yaml"
    script.write_text(yaml.safe_dump([{"tool_calls": [{"name": "Bash", "arguments": {"command": ATTACKS[attack]}}]},
                                      {"content": "done"}]))
    cfg = load_config([f"benchmark.path={tmp_path / 'tasks'}", "run.executor=local",
                       f"store.uri={tmp_path / 'store'}", f"sandbox.local.root_dir={tmp_path / 'sb'}",
                       "run.progress=false", "agent=scripted", f"agent.script={script}", "grade.mode=in_place",
                       "run.max_attempts=1", "grade.kill_leftovers=true"])
    summary = asyncio.run(run_experiment(cfg))
    (row,) = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id).to_pylist()
    assert (row["status"], row["reward"]) == ("unresolved", 0.0), row["error"]
    assert row["grading_mode"] == "in_place" and row["tool_calls"] == 1


DUAL_DOCKERFILE = ("FROM python:3.11-slim\nWORKDIR /app\n"
                   "RUN git init -q && printf 'out/\\n' > .gitignore && git add -A && "
                   "git -c user.name=t -c user.email=t@example.invalid commit -qm init\n")
CHECK_OUT = ("#!/bin/bash\nif grep -qx fixed /app/out/result.txt; then echo 1; else echo 0; fi "
             "> /logs/verifier/reward.txt\n")


def test_by_default_a_server_the_agent_left_running_is_still_there_for_the_tests(tmp_path: Path) -> None:
    # Terminal-Bench style: the answer is a server the verifier queries; a plain Harbor task is
    # not patch-graded, so grade.kill_leftovers=null keeps it running. The verifier runs outside
    # the agent's PID namespace (inside/verifier_ns.py): it reaches the server over the network
    # and sees it by name, not by a PID the agent wrote down.
    make_task(tmp_path / "tasks", "server", "#!/bin/bash\n"
              "python3 -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:18731/answer.txt\").read())' "
              "| grep -q fixed && pgrep -f 'http.server 18731' >/dev/null && echo 1 > /logs/verifier/reward.txt "
              "|| echo 0 > /logs/verifier/reward.txt\n")
    script = tmp_path / "serve.yaml"
    call = {"name": "Bash", "arguments": {"command": "mkdir -p /tmp/www && echo fixed > /tmp/www/answer.txt && "
                                                     "cd /tmp/www && setsid nohup python3 -m http.server 18731 "
                                                     ">/dev/null 2>&1 < /dev/null & sleep 1"}}
    script.write_text(yaml.safe_dump([{"tool_calls": [call]}, {"content": "done"}]))
    cfg = load_config([f"benchmark.path={tmp_path / 'tasks'}", "run.executor=local",
                       f"store.uri={tmp_path / 'store'}", f"sandbox.local.root_dir={tmp_path / 'sb'}",
                       "run.progress=false", "agent=scripted", f"agent.script={script}", "run.max_attempts=1"])
    summary = asyncio.run(run_experiment(cfg))
    (row,) = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id).to_pylist()
    assert row["status"] == "resolved", row["error"]


@pytest.mark.parametrize("command, suspect", [
    # the answer is in an ignored file: it exists where the agent worked, not in its patch
    ("mkdir -p out && echo fixed > out/result.txt", True),
    # an honest agent's work is its patch: both verdicts agree
    ("git rm -q --cached .gitignore && rm .gitignore && mkdir -p out && echo fixed > out/result.txt", False),
])
def test_dual_grading_marks_a_trial_resolved_in_place_but_not_from_its_patch(
        tmp_path: Path, command: str, suspect: bool) -> None:
    task = make_task(tmp_path / "tasks", "dual", CHECK_OUT)
    (task / "environment" / "Dockerfile").write_text(DUAL_DOCKERFILE)
    script = tmp_path / "agent.yaml"
    call = {"name": "Bash", "arguments": {"command": f"cd /app && {command}"}}
    script.write_text(yaml.safe_dump([{"tool_calls": [call]}, {"content": "done"}]))
    cfg = load_config([f"benchmark.path={tmp_path / 'tasks'}", "run.executor=local",
                       f"store.uri={tmp_path / 'store'}", f"sandbox.local.root_dir={tmp_path / 'sb'}",
                       "run.progress=false", "agent=scripted", f"agent.script={script}", "grade.mode=both",
                       "run.max_attempts=1"])
    summary = asyncio.run(run_experiment(cfg))
    (row,) = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id).to_pylist()
    assert (row["status"], row["grading_mode"]) == ("resolved", "both"), row["error"]
    assert row["fresh_status"] == ("unresolved" if suspect else "resolved")
    assert row["tamper_suspect"] is suspect and row["verifier_runs"] == 2
