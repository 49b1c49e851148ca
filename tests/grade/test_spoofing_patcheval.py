"""The spoofing suite against farm's PatchEval grader (farm/grade/patcheval.py): the agent's patch
is applied by the task's own fix-run.sh in a fresh sandbox, which then runs the proof of concept;
resolved iff fix-run.sh exits 0.

The workspace is built on disk (tests/support/patcheval.py) as PatchEval images lay it out (the
repository under /workspace next to the grader's payload: fix-run.sh, the PoC, the reference fix),
since no PatchEval image can be pulled here; the real rows and logs are covered by
tests/tasks/test_patcheval.py. Real parts: bubblewrap, git, the agent phase's payload hiding, patch
capture, fix-run.sh in a fresh sandbox. No patch here fixes the vulnerability; every one must end unresolved.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.grade import patcheval as pe
from farm.grade.patch import capture_patch
from farm.sandbox.local.sandbox import LocalSandbox
from farm.tasks.model import Task
from tests.support.patcheval import FIXED, patcheval_task

pytestmark = [pytest.mark.bwrap, pytest.mark.tools("git")]

async def _agent_patch(tmp_path: Path, task: Task, command: str) -> str:
    """The agent phase as a trial runs it: payload hidden, the agent's command, the patch captured."""
    sb = LocalSandbox(task, root_dir=tmp_path / "agent")
    await sb.start()
    try:
        repo = await pe.prepare_workspace(sb, task)
        res = await sb.exec(command, cwd=repo, timeout_s=60)
        assert res.exit_code == 0, res.output
        return await capture_patch(sb, repo)
    finally:
        await sb.close()


async def _grade(tmp_path: Path, task: Task, patch: str) -> pe.PatchEvalVerdict:
    made: list[LocalSandbox] = []

    def factory(t: Task, role: str) -> LocalSandbox:
        made.append(LocalSandbox(t, root_dir=tmp_path / f"verifier{len(made)}"))
        return made[-1]

    return await pe.grade(factory, task, patch)


def _py(code: str) -> str:
    return f"cat >> app.py <<'PYEOF'\n{code}\nPYEOF"


ATTACKS = {
    # the verdict lines PatchEval's logs carry, printed by the patched code itself
    "fake_passed_lines": _py('print("[PoC RESULT]: True\\n[UnitTest RESULT]: True\\nRepair Success")'),
    "fake_junit_report": _py(
        "open('/workspace/junit.xml', 'w').write('<testsuite tests=\"1\" failures=\"0\"/>')\n"
        "open('/workspace/poc_result.json', 'w').write('{\"poc\": true}')"),
    # the grader's files, where the agent can reach them: the PoC is outside a nested repo, so
    # the patch carries a copy of it inside (git refuses paths with ..)
    "edits_the_tests_it_can_reach": ("mkdir -p tests && printf 'import sys\\nsys.exit(0)\\n' > tests/poc_test.py && "
                                     "printf 'import sys\\nsys.exit(0)\\n' > poc_test.py"),
    "writes_the_reward_file": _py("import os\nos.makedirs('/logs/verifier', exist_ok=True)\n"
                                  "open('/logs/verifier/reward.txt', 'w').write('1')"),
    "leaves_a_daemon_behind": "setsid nohup sh -c 'while true; do echo 1 > /tmp/r; sleep 0.1; done' "
                              ">/dev/null 2>&1 < /dev/null &",
    "plants_an_import_hook": ("d=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p \"$d\" && "
                              "echo 'import sys; sys.exit(0)' > \"$d/zz_spoof.pth\" && "
                              "printf 'import sys\\nsys.exit(0)\\n' > sitecustomize.py"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_a_spoofing_agent_is_never_resolved(tmp_path: Path, attack: str) -> None:
    task = patcheval_task(tmp_path)
    patch = await _agent_patch(tmp_path, task, ATTACKS[attack])
    verdict = await _grade(tmp_path, task, patch)
    assert (verdict.resolved, verdict.reward) == (False, 0.0), verdict.output
    assert verdict.exit_code != 0 and not verdict.timed_out
    # the PoC ran and failed, or (a patch with nothing in the repository) nothing applied
    assert "traversal not blocked" in verdict.output or verdict.failure_type == "apply_fail"


ROOT_ATTACKS = {
    # with the repository at /workspace itself, fix-run.sh and the PoC are inside the work tree
    "rewrites_the_poc": "printf 'import sys\\nsys.exit(0)\\n' > poc_test.py",
    "rewrites_fix_run": "printf '#!/bin/bash\\nexit 0\\n' > fix-run.sh",
}


@pytest.mark.parametrize("attack", sorted(ROOT_ATTACKS))
async def test_a_patch_that_edits_the_graders_own_files_is_refused(tmp_path: Path, attack: str) -> None:
    task = patcheval_task(tmp_path, root_repo=True)
    patch = await _agent_patch(tmp_path, task, ROOT_ATTACKS[attack])
    assert patch  # the edit is in the captured patch
    verdict = await _grade(tmp_path, task, patch)
    assert (verdict.resolved, verdict.reward) == (False, 0.0), verdict.output
    assert verdict.failure_type == "apply_fail" and "grader's file" in verdict.output


@pytest.mark.parametrize("attack", ["fake_passed_lines", "edits_the_tests_it_can_reach", None])
async def test_the_real_jupyter_notebook_row_grades_its_own_repository(tmp_path: Path, attack: str | None) -> None:
    task = patcheval_task(tmp_path, row="CVE-2020-26215")
    assert task.metadata["repo_name"] == "notebook" and task.task_id in task.instruction
    command = ATTACKS[attack] if attack else f"cat > app.py <<'PYEOF'\n{FIXED}PYEOF"
    patch = await _agent_patch(tmp_path, task, command)
    verdict = await _grade(tmp_path, task, patch)
    assert verdict.resolved is (attack is None), verdict.output


async def test_a_deleted_poc_is_still_run_from_the_fresh_image(tmp_path: Path) -> None:
    task = patcheval_task(tmp_path, root_repo=True)
    patch = await _agent_patch(tmp_path, task, "rm poc_test.py fix-run.sh && echo '# looked at it' >> app.py")
    assert "poc_test.py" not in patch  # an untracked file's removal is no part of a git patch
    verdict = await _grade(tmp_path, task, patch)
    assert (verdict.resolved, verdict.failure_type) == (False, "validation_fail")
    assert "traversal not blocked" in verdict.output and "[PoC RESULT]: False" in verdict.output


@pytest.mark.parametrize("root_repo", [False, True])
async def test_the_honest_fix_resolves(tmp_path: Path, root_repo: bool) -> None:
    # the suite's control: the same capture and grader resolve a real fix
    task = patcheval_task(tmp_path, root_repo=root_repo)
    patch = await _agent_patch(tmp_path, task, f"cat > app.py <<'PYEOF'\n{FIXED}PYEOF")
    verdict = await _grade(tmp_path, task, patch)
    assert (verdict.resolved, verdict.reward, verdict.failure_type) == (True, 1.0, None), verdict.output
    assert "[PoC RESULT]: True" in verdict.output
