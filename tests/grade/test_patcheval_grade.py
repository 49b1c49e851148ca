"""PatchEval grading in real sandboxes: finding the repo, hiding the payload, fix-run.sh in a fresh one.

The workspaces are built here (a git repo under /workspace plus the grader's files), so nothing
from ../shared is needed; tests/tasks/test_patcheval.py covers the dataset rows and upstream logs.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from farm.grade import patcheval as pe
from farm.sandbox.base import SandboxClosedError
from farm.sandbox.local.sandbox import LocalSandbox
from farm.tasks.model import BuildStep, Environment, Task, VerifierSpec

pytestmark = [pytest.mark.bwrap, pytest.mark.tools("git")]


def _git_repo(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "f.txt").write_text("base\n")
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A"], cwd=path, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base"], cwd=path, check=True)


def _task(tmp_path: Path, repos: list[str], *, repo_name: str = "", fix_run: str = "exit 0\n",
          timeout_s: float = 30.0, root_repo: bool = False) -> Task:
    ctx = tmp_path / "ctx"
    ws = ctx / "workspace"
    ws.mkdir(parents=True)
    if root_repo:
        shutil.rmtree(ws)
        _git_repo(ws)
    for r in repos:
        _git_repo(ws / r)
    (ws / "fix-run.sh").write_text(fix_run)
    (ws / "fix.patch").write_text("the reference fix\n")
    (ws / "llm.patch").write_text("payload\n")
    (ws / ".hidden").write_text("payload\n")
    env = Environment(workdir="/workspace", build_context=ctx,
                      build_steps=(BuildStep("copy", "workspace", "/workspace"),))
    return Task(benchmark="patcheval", task_id="CVE-1", instruction="", environment=env,
                verifier=VerifierSpec(protocol="patcheval"), verifier_timeout_s=timeout_s,
                agent_network="no-network", verifier_network="no-network", metadata={"repo_name": repo_name})


async def _agent_view(tmp_path: Path, task: Task, fn):
    sb = LocalSandbox(task, root_dir=tmp_path / "agent")
    await sb.start()
    try:
        return await fn(sb), (await sb.exec("ls -A /workspace", cwd="/")).stdout.split()
    finally:
        await sb.close()


async def test_the_named_repo_wins_over_others(tmp_path: Path) -> None:
    task = _task(tmp_path, ["Vuln", "other"], repo_name="Vuln")
    repo, _ = await _agent_view(tmp_path, task, lambda sb: pe.detect_repo(sb, task))
    assert repo == "/workspace/Vuln"


async def test_the_lower_cased_name_is_a_candidate_too(tmp_path: Path) -> None:
    task = _task(tmp_path, ["vuln", "other"], repo_name="Vuln")
    repo, _ = await _agent_view(tmp_path, task, lambda sb: pe.detect_repo(sb, task))
    assert repo == "/workspace/vuln"


async def test_the_agent_datasets_work_dir_wins_over_the_name(tmp_path: Path) -> None:
    task = _task(tmp_path, ["vuln", "src/app"], repo_name="Vuln")
    task = replace(task, metadata={**task.metadata, "work_dir": "/workspace/src/app"})
    repo, _ = await _agent_view(tmp_path, task, lambda sb: pe.detect_repo(sb, task))
    assert repo == "/workspace/src/app"


async def test_a_single_unnamed_repo_is_found_below_the_workspace(tmp_path: Path) -> None:
    task = _task(tmp_path, ["org/proj"], repo_name="unrelated")
    repo, _ = await _agent_view(tmp_path, task, lambda sb: pe.detect_repo(sb, task))
    assert repo == "/workspace/org/proj"


async def test_several_unnamed_repos_are_an_error_naming_them(tmp_path: Path) -> None:
    task = _task(tmp_path, ["a", "b"])

    async def detect(sb):
        with pytest.raises(RuntimeError) as e:
            await pe.detect_repo(sb, task)
        return str(e.value)

    msg, _ = await _agent_view(tmp_path, task, detect)
    assert msg in ("CVE-1: cannot locate the repository under /workspace: ['/workspace/a', '/workspace/b']",
                   "CVE-1: cannot locate the repository under /workspace: ['/workspace/b', '/workspace/a']")


async def test_no_repo_is_an_error(tmp_path: Path) -> None:
    task = _task(tmp_path, [])

    async def detect(sb):
        with pytest.raises(RuntimeError, match=r"^CVE-1: cannot locate the repository under /workspace: $"):
            await pe.detect_repo(sb, task)

    await _agent_view(tmp_path, task, detect)


async def test_prepare_hides_everything_but_the_repo(tmp_path: Path) -> None:
    task = _task(tmp_path, ["org/proj"])
    repo, left = await _agent_view(tmp_path, task, lambda sb: pe.prepare_workspace(sb, task))
    assert repo == "/workspace/org/proj" and left == ["org"]


async def test_prepare_with_the_repo_at_the_workspace_root_removes_only_the_fix(tmp_path: Path) -> None:
    task = _task(tmp_path, [], root_repo=True)
    repo, left = await _agent_view(tmp_path, task, lambda sb: pe.prepare_workspace(sb, task))
    assert repo == "/workspace"
    assert sorted(left) == [".git", ".hidden", "f.txt", "fix-run.sh", "llm.patch"]


# --- fix-run.sh in a fresh sandbox ---------------------------------------------------------------

FIX_RUN_REPORT = """#!/bin/bash
echo "cwd=$(pwd)"
echo "mode=$(stat -c %a /workspace/fix.patch)"
echo to-stderr >&2
printf 'patch<'; cat /workspace/fix.patch; echo '>'
exit ${FIX_EXIT:-0}
"""


class Factory:
    """Makes real local sandboxes and remembers what it was asked for."""

    def __init__(self, tmp_path: Path, is_async: bool = False) -> None:
        self.tmp_path, self.is_async = tmp_path, is_async
        self.made: list[tuple[str, LocalSandbox]] = []

    def __call__(self, task: Task, role: str):
        sb = LocalSandbox(task, root_dir=self.tmp_path / f"sb{len(self.made)}")
        self.made.append((role, sb))
        if self.is_async:
            async def made() -> LocalSandbox:
                return sb
            return made()
        return sb


@pytest.mark.parametrize("is_async", [False, True])
async def test_grade_runs_fix_run_in_a_fresh_verifier_sandbox(tmp_path: Path, is_async: bool) -> None:
    task = _task(tmp_path, ["proj"], fix_run=FIX_RUN_REPORT)
    factory = Factory(tmp_path, is_async)
    v = await pe.grade(factory, task, "the agent's patch")
    assert [role for role, _ in factory.made] == ["verifier"]
    with pytest.raises(SandboxClosedError):  # closed after grading
        await factory.made[0][1].exec("true")
    assert (v.resolved, v.reward, v.exit_code, v.timed_out, v.failure_type) == (True, 1.0, 0, False, None)
    assert v.output == "cwd=/workspace\nmode=644\nto-stderr\npatch<the agent's patch\n>\n"
    assert 0 < v.verify_s < 120


async def test_fix_run_runs_in_a_login_shell_as_the_evaluator_runs_it(tmp_path: Path) -> None:
    # bash -lc, as run_evaluation.py: a case image may put its toolchain on PATH in a profile
    # that only a login shell reads
    task = _task(tmp_path, ["proj"], fix_run="run-poc\n")
    ctx = task.environment.build_context
    assert ctx is not None
    (ctx / "toolchain").mkdir()
    (ctx / "toolchain" / "run-poc").write_text("#!/bin/sh\necho the poc ran\n")
    (ctx / "toolchain" / "run-poc").chmod(0o755)
    (ctx / "profile").write_text('PATH="/root/toolchain:$PATH"\n')
    steps = (*task.environment.build_steps, BuildStep("copy", "toolchain", "/root/toolchain"),
             BuildStep("copy", "profile", "/root/.profile"))
    v = await pe.grade(Factory(tmp_path), replace(task, environment=replace(task.environment, build_steps=steps)), "x")
    assert (v.resolved, v.output) == (True, "the poc ran\n")


async def test_a_failing_fix_run_is_unresolved_with_its_failure_type(tmp_path: Path) -> None:
    task = _task(tmp_path, ["proj"], fix_run="echo 'error: patch does not apply' >&2; exit 3\n")
    v = await pe.grade(Factory(tmp_path), task, "x\n")
    assert (v.resolved, v.reward, v.exit_code, v.timed_out, v.failure_type) == (False, 0.0, 3, False, "apply_fail")
    assert v.output == "error: patch does not apply\n"


async def test_a_fix_run_past_the_verifier_timeout_is_a_timeout(tmp_path: Path) -> None:
    task = _task(tmp_path, ["proj"], fix_run="sleep 20\n", timeout_s=0.5)
    v = await pe.grade(Factory(tmp_path), task, "x\n")
    assert (v.resolved, v.reward, v.timed_out, v.failure_type) == (False, 0.0, True, "timeout")
    assert v.exit_code == 124 and v.verify_s < 15


def test_with_trailing_newline():
    # the evaluator adds a newline wherever the patch does not end in one, the empty patch included
    assert pe.with_trailing_newline("") == "\n"
    assert pe.with_trailing_newline("a\n") == "a\n"
    assert pe.with_trailing_newline("a") == "a\n"
    assert pe.with_trailing_newline("a\nb") == "a\nb\n"


def test_failure_type_heuristic():
    assert pe.failure_type("anything", 0) is None
    assert pe.failure_type("", 0, timed_out=True) == "timeout"
    assert pe.failure_type("error: corrupt patch at line 3", 1) == "apply_fail"
    assert pe.failure_type("SyntaxError: invalid syntax", 1) == "compilation_fail"
    assert pe.failure_type("x.go:1:2: undefined\npanic: boom", 1) == "validation_fail"
    assert pe.failure_type("assertion failed", 1) == "validation_fail"


def test_failure_type_follows_the_evaluators_rule_for_the_tasks_language():
    # a JavaScript TypeError (no colon-space needed) fails compilation; in Python it is a failed PoC
    assert pe.failure_type("TypeError\n", 1, language="JavaScript") == "compilation_fail"
    assert pe.failure_type("TypeError: x is not a function", 1, language="Python") == "validation_fail"
    # Go: file:line:col is a build error unless the log also shows a panic; a Python log may show both
    assert pe.failure_type("main.go:3:1: undefined: x", 1, language="Go") == "compilation_fail"
    assert pe.failure_type("main.go:3:1: undefined: x\npanic: boom", 1, language="Go") == "validation_fail"
    assert pe.failure_type("SyntaxError: bad\npanic: ", 1, language="Python") == "compilation_fail"


def test_grader_log_fields():
    log = "[PoC RESULT]: True\n[UnitTest RESULT]: False\n[Validation TYPE]: poc\n"
    assert pe.parse_grader_log(log) == {"poc_result": True, "unittest_result": False, "validation_type": "poc",
                                        "poc_only_success": True, "strict_success": False}
    assert pe.parse_grader_log("[PoC RESULT]: True\n") == {
        "poc_result": True, "unittest_result": None, "validation_type": None, "poc_only_success": True,
        "strict_success": True}
    assert pe.parse_grader_log("[PoC RESULT]: maybe\n[UnitTest RESULT]: True\n") == {
        "poc_result": None, "unittest_result": True, "validation_type": None, "poc_only_success": False,
        "strict_success": False}
