"""A PatchEval trial through run_trial: the real loop (a scripted policy over HTTP), bubblewrap,
the agent phase's payload hiding, patch capture and fix-run.sh in a fresh sandbox.

Real PatchEval images keep the repository below the workspace (/workspace/<project>); the
trial must capture the patch there, not at the workspace (which is no git work tree), and take
it against the commit the agent started from, so that a fix the agent committed is graded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.patcheval import FIXED, patcheval_task, run_scripted_trial

pytestmark = [pytest.mark.bwrap, pytest.mark.tools("git")]

WRITE_FIX = f"cat > app.py <<'PYEOF'\n{FIXED}PYEOF"
COMMIT = "\ngit add -A && git -c user.email=a@b -c user.name=a commit -qm fix"


@pytest.mark.parametrize(("root_repo", "command"), [
    (False, WRITE_FIX), (False, WRITE_FIX + COMMIT), (True, WRITE_FIX + COMMIT),
], ids=["nested", "nested-committed", "root-committed"])
def test_a_patcheval_fix_resolves_through_the_trial(tmp_path: Path, root_repo: bool, command: str) -> None:
    task = patcheval_task(tmp_path, root_repo=root_repo)
    repo = "/workspace" if root_repo else "/workspace/proj"
    out = run_scripted_trial(tmp_path, task, f"cd {repo} && {command}")
    row = out.result
    assert (row.status, row.error_class) == ("resolved", None), (row.error, out.artifacts.get("patch.diff"))
    assert row.base_commit is None or len(row.base_commit) == 40
    assert b"+        raise ValueError(name)" in out.artifacts["patch.diff"]
