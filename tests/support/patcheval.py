"""A PatchEval task over a workspace built on disk as PatchEval images lay it out (the repository
under /workspace next to the grader's payload: fix-run.sh, the PoC, the reference fix), shared by
the grading tests (tests/grade/test_spoofing_patcheval.py) and the trial tests
(tests/run/test_patcheval_trial.py, tests/run/test_patcheval_case.py: a real record's task on
such a case). No PatchEval image can be pulled here.
"""

from __future__ import annotations

import asyncio
import functools
import subprocess
from dataclasses import replace
from pathlib import Path

import yaml

from farm.agent.policies.server import start_policy_server
from farm.config import load_config
from farm.run.plan import TrialSpec
from farm.run.rows import TrialOutcome
from farm.run.trial import run_trial
from farm.sandbox.registry import open_sandbox
from farm.tasks.model import BuildStep, Environment, Task, VerifierSpec
from farm.tasks.patcheval import load_patcheval_rows

VULNERABLE = "def safe_join(root, name):\n    return root + '/' + name\n"
FIXED = ("def safe_join(root, name):\n    if '..' in name.split('/'):\n        raise ValueError(name)\n"
         "    return root + '/' + name\n")
# PatchEval's fix-run.sh shape: apply the patch, run the PoC, print the verdict lines, exit with it
FIX_RUN = """#!/bin/bash
cd {repo}
git apply --whitespace=nowarn /workspace/fix.patch || {{ echo "error: patch does not apply"; exit 1; }}
python3 /workspace/poc_test.py
rc=$?
if [ $rc -eq 0 ]; then echo "[PoC RESULT]: True"; else echo "[PoC RESULT]: False"; fi
exit $rc
"""
POC = """import sys
sys.path.insert(0, "{repo}")
from app import safe_join
try:
    safe_join("/srv", "../etc/passwd")
except ValueError:
    sys.exit(0)
print("traversal not blocked")
sys.exit(1)
"""


def git(path: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=path, check=True,
                   capture_output=True)


ROWS = Path(__file__).resolve().parents[1] / "fixtures" / "grading" / "patcheval_verified_rows.jsonl"


def patcheval_task(tmp_path: Path, *, root_repo: bool = False, row: str | None = None) -> Task:
    """A PatchEval task over a workspace built here; with ``row``, the task the real dataset row
    of that CVE loads to (its id, instruction, repository name), on that workspace."""
    real = None
    if row is not None:
        (real,) = [t for t in load_patcheval_rows(ROWS).tasks if t.task_id == row]
    name = real.metadata["repo_name"] if real is not None else "proj"
    ws = tmp_path / "ctx" / "workspace"
    repo = ws if root_repo else ws / name
    repo.mkdir(parents=True)
    (repo / "app.py").write_text(VULNERABLE)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "vulnerable")
    if real is not None:  # a second repository beside it: the named one must be the one found
        (ws / "vendor").mkdir(parents=True)
        git(ws / "vendor", "init", "-q")
    repo_path = "/workspace" if root_repo else f"/workspace/{name}"
    (ws / "fix-run.sh").write_text(FIX_RUN.format(repo=repo_path))
    (ws / "poc_test.py").write_text(POC.format(repo=repo_path))
    (ws / "fix.patch").write_text("the reference fix\n")
    env = Environment(workdir="/workspace", build_context=tmp_path / "ctx",
                      build_steps=(BuildStep("copy", "workspace", "/workspace"),))
    if real is not None:
        return replace(real, environment=env, verifier_timeout_s=60)
    return Task(benchmark="patcheval", task_id="CVE-2099-0001", instruction="", environment=env,
                verifier=VerifierSpec(protocol="patcheval"), verifier_timeout_s=60,
                agent_network="no-network", verifier_network="no-network", metadata={"repo_name": "proj"})


def made_case(tmp_path: Path, task: Task) -> Task:
    """``task`` (a real record's, loaded with its agent dataset row) over a case made here in the
    published images' layout: the repository at the record's ``work_dir`` at its vulnerable
    commit, and beside it /workspace/fix-run.sh (applies /workspace/fix.patch, runs the PoC),
    the PoC and the reference fix as /workspace/fix.patch. Only the image differs: it is built
    on disk, as no case image can be pulled here."""
    work_dir = str(task.metadata["work_dir"])
    ws = tmp_path / "case" / "workspace"
    repo = ws / work_dir.removeprefix("/workspace").strip("/")
    repo.mkdir(parents=True)
    (repo / "app.py").write_text(VULNERABLE)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "vulnerable")
    (repo / "app.py").write_text(FIXED)
    gold = subprocess.run(["git", "diff"], cwd=repo, check=True, capture_output=True, text=True).stdout
    git(repo, "checkout", "-q", "app.py")
    (ws / "fix-run.sh").write_text(FIX_RUN.format(repo=work_dir))
    (ws / "poc_test.py").write_text(POC.format(repo=work_dir))
    (ws / "fix.patch").write_text(gold)
    env = Environment(workdir=task.workdir, build_context=tmp_path / "case",
                      build_steps=(BuildStep("copy", "workspace", "/workspace"),))
    return replace(task, environment=env)


def run_scripted_trial(tmp_path: Path, task: Task, command: str) -> TrialOutcome:
    """One trial of ``task`` through ``run_trial`` on the local backend, its agent a scripted
    policy server that runs ``command`` in one Bash call; the TrialOutcome."""
    script = tmp_path / "agent.yaml"
    script.write_text(yaml.safe_dump([{"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]},
                                      {"content": "done"}]))
    cfg = load_config([f"store.uri={tmp_path / 'store'}", f"sandbox.local.root_dir={tmp_path / 'sb'}",
                       "agent=scripted", f"agent.script={script}"])
    spec = TrialSpec("run", "k" * 64, task.benchmark, task.task_id, 0, "base", "scripted")
    with start_policy_server("scripted", script=str(script)) as server:
        return asyncio.run(run_trial(spec, task, cfg, 1, base_url=server.base_url, policy="scripted",
                                     sandbox_factory=functools.partial(open_sandbox)))
