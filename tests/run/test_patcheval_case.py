"""A published PatchEval record end to end, on a case made in the images' layout.

The task is the one ``benchmark=patcheval`` loads from ../shared's records and agent dataset
(CVE-2023-33977: Kiwi TCMS, whose agent dataset puts the repository at /workspace/kiwi while
the repository URL says Kiwi); only its image is replaced by a case built on disk
(tests/support/patcheval.py ``made_case``), since no case image can be pulled here. A trial runs
it as a worker does: the scripted agent over HTTP in bubblewrap, the payload hidden, the patch
captured, fix-run.sh in a fresh sandbox.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.config import load_config
from farm.grade import patcheval as grade
from farm.sandbox.local.sandbox import LocalSandbox
from farm.tasks.benchmark import load_benchmark_report
from farm.tasks.model import Task
from tests.shared import shared_path
from tests.support.patcheval import FIXED, made_case, run_scripted_trial

pytestmark = [pytest.mark.bwrap, pytest.mark.tools("git")]

CVE = "CVE-2023-33977"


def _case(tmp_path: Path) -> Task:
    published = shared_path("fixtures", "patcheval-verified")
    cfg = load_config(["benchmark=patcheval", f"benchmark.path={published}", f"benchmark.task_ids=[{CVE}]"])
    (task,) = load_benchmark_report(cfg.benchmark).tasks
    assert task.metadata["work_dir"] == "/workspace/kiwi" and task.metadata["repo_name"] == "Kiwi"
    return made_case(tmp_path, task)


@pytest.mark.parametrize(("command", "status"), [
    (f"cat > app.py <<'PYEOF'\n{FIXED}PYEOF", "resolved"),
    # a change that leaves the traversal open
    ("sed -i 's/return root/return str(root)/' app.py", "unresolved"),
    # no change at all: the empty patch
    ("git status --short", "unresolved"),
], ids=["fix", "wrong", "empty"])
def test_a_published_record_grades_both_ways_through_the_trial(tmp_path: Path, command: str, status: str) -> None:
    task = _case(tmp_path)
    out = run_scripted_trial(tmp_path, task, f"cd /workspace/kiwi && {command}")
    row = out.result
    assert (row.benchmark, row.task_id) == ("patch_eval_verified", CVE)
    assert (row.status, row.error_class) == (status, None), (row.error, out.artifacts.get("verifier.txt"))
    verdict = "[PoC RESULT]: True" if status == "resolved" else "[PoC RESULT]: False"
    if command.startswith("git status"):  # graded all the same: the evaluator's lone newline does not apply
        assert out.artifacts["patch.diff"] == b"" and b"patch does not apply" in out.artifacts["verifier.txt"]
    else:
        assert verdict.encode() in out.artifacts["verifier.txt"]


def _local(tmp_path: Path):
    def make(task: Task, role: str) -> LocalSandbox:
        return LocalSandbox(task, root_dir=tmp_path / "sb")
    return make


@pytest.mark.parametrize("patch", ["gold", ""], ids=["gold", "empty"])
async def test_the_cases_own_fix_resolves_and_an_empty_patch_does_not(tmp_path: Path, patch: str) -> None:
    task = _case(tmp_path)
    build_context = task.environment.build_context
    assert build_context is not None
    text = (build_context / "workspace" / "fix.patch").read_text() if patch == "gold" else patch
    verdict = await grade.grade(_local(tmp_path), task, text)
    assert verdict.resolved is (patch == "gold"), verdict.output
    if patch == "":
        # git apply refuses the lone newline the evaluator writes: the PoC never runs
        assert verdict.failure_type == "apply_fail" and "[PoC RESULT]" not in verdict.output
