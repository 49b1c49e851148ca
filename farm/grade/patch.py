"""Capture the agent's work as a binary git diff, and apply it in a fresh sandbox.

The patch is taken relative to HEAD with untracked files included (``git add -A`` then
``git diff --cached --binary``), and the index is reset afterwards so the workspace the
verifier sees in place is exactly what the agent left.
"""

from __future__ import annotations

import shlex

from farm.errors import FarmError
from farm.sandbox.base import Sandbox

PATCH_CAP = 64 << 20
PATCH_PATH = "/tmp/.farm-agent.patch"


class PatchError(FarmError, RuntimeError):
    """The patch could not be captured (infrastructure) — the trial cannot be graded fairly."""


async def is_git_worktree(sandbox: Sandbox, workdir: str) -> bool:
    res = await sandbox.exec(f"git -C {shlex.quote(workdir)} rev-parse --is-inside-work-tree", timeout_s=30, cwd="/")
    return res.exit_code == 0 and res.stdout.strip() == "true"


async def head_commit(sandbox: Sandbox, workdir: str) -> str | None:
    """The commit checked out in ``workdir`` (None outside a git work tree or before any commit)."""
    res = await sandbox.exec(f"git -C {shlex.quote(workdir)} rev-parse --verify -q HEAD", timeout_s=30, cwd="/")
    head = res.stdout.strip()
    return head if res.exit_code == 0 and len(head) in (40, 64) else None


async def capture_patch(sandbox: Sandbox, workdir: str, require_git: bool = True, base: str | None = None) -> str:
    """Everything the agent changed in ``workdir`` as one binary git diff.

    ``base``: the commit the agent started from. Against it, work the agent committed is in the
    patch too; against HEAD (without ``base``) a commit of the fix would leave an empty patch, so
    fresh grading and regrading would see nothing.

    Raises:
        PatchError: not a git work tree where one is required, git failed, or the patch is
            larger than PATCH_CAP.
    """
    if not await is_git_worktree(sandbox, workdir):
        if require_git:
            raise PatchError(f"workdir {workdir} is not a git work tree, and the task requires a git patch")
        return ""
    wd = shlex.quote(workdir)
    against = f" {shlex.quote(base)}" if base else ""
    cmd = (
        f"git -C {wd} add -A >/dev/null && git -C {wd} -c core.quotepath=off diff --cached --binary{against}; "
        f"rc=$?; git -C {wd} reset -q --mixed HEAD >/dev/null 2>&1; exit $rc"
    )
    res = await sandbox.exec(cmd, timeout_s=120, cwd="/", output_cap=PATCH_CAP)
    if res.exit_code != 0 or res.timed_out:
        raise PatchError(f"git diff failed (exit {res.exit_code}): {res.stderr[-500:]}")
    if res.truncated:
        raise PatchError(f"patch larger than {PATCH_CAP} bytes")
    return res.stdout


async def apply_patch(sandbox: Sandbox, workdir: str, patch: str) -> tuple[bool, str]:
    """Apply a captured patch in another sandbox; (ok, git's output)."""
    if not patch.strip():
        return True, "empty patch"
    await sandbox.write_file(PATCH_PATH, patch.encode("utf-8", errors="surrogateescape"))
    res = await sandbox.exec(
        f"git -C {shlex.quote(workdir)} apply --binary --whitespace=nowarn {PATCH_PATH}",
        timeout_s=120, cwd="/", merge_stderr=True,
    )
    return res.exit_code == 0, res.output
