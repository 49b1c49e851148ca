"""Capture the agent's work as a binary git diff, and apply it in a fresh sandbox.

The patch is taken relative to HEAD with untracked files included (``git add -A`` then
``git diff --cached --binary``), and the index is reset afterwards so the workspace the
verifier sees in place is exactly what the agent left. Untracked files the task's image already
had before the agent started (an install's ``*.egg-info`` in a repository that does not ignore
it, build outputs) are no part of the agent's work: :func:`record_untracked_baseline` notes them
with their content hashes, and a capture leaves out those still unchanged — otherwise the patch
would not apply in a fresh sandbox from the same image ("already exists in working directory").
``capture_freeing_pids`` first makes sure git can start at all: an agent's fork storm is killed,
then the patch captured.
"""

from __future__ import annotations

import re
import shlex

from farm.errors import FarmError
from farm.sandbox.base import Sandbox, SandboxClosedError, SandboxError, SandboxLostError

PATCH_CAP = 64 << 20
PATCH_PATH = "/tmp/.farm-agent.patch"
CAPTURE_PATH = "/tmp/.farm-capture.patch"  # where a capture writes the diff before reading it back


class PatchError(FarmError, RuntimeError):
    """The patch could not be captured (infrastructure) — the trial cannot be graded fairly."""


# git's own "no": not a repository, or a directory it cannot enter (both exit 128). 127 is "no
# git in this image", which also means no work tree. Any other status (126 "cannot execute", a
# signal, a timeout) means git did not get to answer: calling that "not a work tree" would
# record an empty patch for work that exists, and fresh grading or a regrade would score it.
_GIT_SAYS_NO = (127, 128)


async def is_git_worktree(sandbox: Sandbox, workdir: str) -> bool:
    """Whether ``workdir`` is inside a git work tree.

    Raises:
        PatchError: git could not run to answer (exit 126, a signal, a timeout).
    """
    res = await sandbox.exec(f"git -C {shlex.quote(workdir)} rev-parse --is-inside-work-tree", timeout_s=30, cwd="/")
    if res.exit_code == 0 and not res.timed_out:
        return res.stdout.strip() == "true"
    if res.exit_code in _GIT_SAYS_NO and not res.timed_out:
        return False
    raise PatchError(f"git could not run in the sandbox to find the work tree at {workdir} "
                     f"(exit {res.exit_code}{', timed out' if res.timed_out else ''}): {res.stderr[-300:].strip()}")


async def head_commit(sandbox: Sandbox, workdir: str) -> str | None:
    """The commit checked out in ``workdir`` (None outside a git work tree or before any commit)."""
    res = await sandbox.exec(f"git -C {shlex.quote(workdir)} rev-parse --verify -q HEAD", timeout_s=30, cwd="/")
    head = res.stdout.strip()
    return head if res.exit_code == 0 and len(head) in (40, 64) else None


BASELINE = "farm-untracked-baseline"  # in the repository's git directory: "<blob sha> <path>" per line


async def record_untracked_baseline(sandbox: Sandbox, workdir: str) -> None:
    """Note the untracked, not ignored files ``workdir`` has now (before the agent), with their
    hashes, so a capture leaves out those the agent did not change. Best effort: a repository
    git cannot read gets no baseline, and every untracked file stays in the patch."""
    wd = shlex.quote(workdir)
    await sandbox.exec(
        f"g=$(git -C {wd} rev-parse --absolute-git-dir 2>/dev/null) || exit 0; "
        f"git -C {wd} -c core.quotepath=off ls-files --others --exclude-standard | head -n 20000 | "
        f"while IFS= read -r p; do h=$(git -C {wd} hash-object -- \"$p\") && printf '%s %s\\n' \"$h\" \"$p\"; "
        f"done > \"$g/{BASELINE}\"",
        timeout_s=120, cwd="/")


# unstage what the baseline lists unchanged: the staged blob of that path is still the recorded one
_DROP_BASELINE = (
    'g=$(git -C {wd} rev-parse --absolute-git-dir) && if [ -s "$g/{baseline}" ]; then '
    'while IFS=" " read -r h p; do s=$(git -C {wd} ls-files -s -- "$p" | cut -d" " -f2); '
    '[ "$s" = "$h" ] && git -C {wd} rm -q --cached -- "$p" >/dev/null 2>&1; done < "$g/{baseline}"; fi; true'
)


async def capture_patch(sandbox: Sandbox, workdir: str, require_git: bool = True, base: str | None = None) -> str:
    """Everything the agent changed in ``workdir`` as one binary git diff.

    ``base``: the commit the agent started from. Against it, work the agent committed is in the
    patch too; against HEAD (without ``base``) a commit of the fix would leave an empty patch, so
    fresh grading and regrading would see nothing.

    Raises:
        PatchError: not a git work tree where one is required, git could not run or failed,
            or the patch is larger than PATCH_CAP.
    """
    try:
        inside = await is_git_worktree(sandbox, workdir)
    except PatchError:
        if require_git:
            raise
        # the task is graded in place, not by this patch: an agent that broke git must not turn
        # its trial into an infra error
        return ""
    if not inside:
        if require_git:
            raise PatchError(f"workdir {workdir} is not a git work tree, and the task requires a git patch")
        return ""
    wd = shlex.quote(workdir)
    against = f" {shlex.quote(base)}" if base else ""
    # into a file, read back as bytes: command output is decoded as text on the way (a byte
    # that is not UTF-8 would arrive as U+FFFD), a file arrives as it is
    cmd = (
        f"git -C {wd} add -A >/dev/null && {{ {_DROP_BASELINE.format(wd=wd, baseline=BASELINE)}; }} && "
        f"git -C {wd} -c core.quotepath=off diff --cached --binary{against} > {CAPTURE_PATH}; "
        f"rc=$?; git -C {wd} reset -q --mixed HEAD >/dev/null 2>&1; [ $rc = 0 ] && wc -c < {CAPTURE_PATH}; exit $rc"
    )
    res = await sandbox.exec(cmd, timeout_s=120, cwd="/")
    if res.exit_code != 0 or res.timed_out:
        raise PatchError(f"git diff failed (exit {res.exit_code}): {res.stderr[-500:]}")
    if int(res.stdout.strip() or 0) > PATCH_CAP:
        raise PatchError(f"patch larger than {PATCH_CAP} bytes")
    try:
        data = await sandbox.read_file(CAPTURE_PATH)
    except OSError as exc:
        raise PatchError(f"the captured patch could not be read back from {CAPTURE_PATH}: {exc}") from exc
    await sandbox.exec(f"rm -f {CAPTURE_PATH}", timeout_s=30, cwd="/")
    # bytes that are not UTF-8 ride as surrogate escapes; every writer encodes them back
    # (apply_patch, the trial's patch.diff artifact) with errors="surrogateescape"
    return data.decode("utf-8", errors="surrogateescape")


async def apply_patch(sandbox: Sandbox, workdir: str, patch: str) -> tuple[bool, str]:
    """Apply a captured patch in another sandbox; (ok, git's output)."""
    if not patch.strip():
        return True, "empty patch"
    await sandbox.write_file(PATCH_PATH, patch.encode("utf-8", errors="surrogateescape"))
    wd = shlex.quote(workdir)
    # a file the patch creates that the image already has untracked (a baseline file the agent
    # changed, see record_untracked_baseline): the patch holds its whole new content, so the
    # image's copy goes first — git apply refuses to create over an existing file
    clear = "".join(
        f"if [ -e {q} ] && ! git -C {wd} ls-files --error-unmatch -- {q} >/dev/null 2>&1; then rm -rf -- {q}; fi; "
        for q in (shlex.quote(f"{workdir.rstrip('/')}/{path}") for path in _created_paths(patch)))
    res = await sandbox.exec(
        f"{clear}git -C {wd} apply --binary --whitespace=nowarn {PATCH_PATH}",
        timeout_s=120, cwd="/", merge_stderr=True,
    )
    return res.exit_code == 0, res.output


_CREATED = re.compile(r"^diff --git a/(.+?) b/\1\nnew file mode ", re.M)


def _created_paths(patch: str) -> list[str]:
    """Paths the patch creates (plain names only: git quotes unusual ones, left to git apply)."""
    return [p for p in _CREATED.findall(patch) if ".." not in p.split("/")]


# the processes the agent's commands left, counted from inside with bash builtins only (no fork
# beyond the shell itself); inside the jail /proc is the commands' namespace's
COUNT_PROCESSES = "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n"


def pid_reserve(limit: int) -> int:
    """The pids of a sandbox kept for farm's own commands (capture, verifier): a quarter, at
    least 32. Leftovers holding more than ``limit - pid_reserve(limit)`` are no daemon."""
    return max(32, limit // 4)


async def capture_freeing_pids(sandbox: Sandbox, repo: str, require_git: bool, base: str | None,
                               pids_limit: int) -> tuple[str, str | None]:
    """The agent's patch, and a note when the agent's leftovers had to be killed first (None
    when they did not).

    The agent's commands may hold (nearly) every pid the sandbox has (a fork storm), so that
    ``git`` cannot start, or starts only now and then: where a count of their processes cannot
    start, or finds them holding the pids kept for farm (``pid_reserve``), or the capture fails,
    the leftovers are killed (``Sandbox.kill_leftovers``) and the patch is captured once more,
    so the agent's own storm ends graded, not retried as an infrastructure error. Nothing is
    killed otherwise: an in-place verifier may test a daemon the agent started (Terminal-Bench).

    Raises:
        PatchError: the capture failed after the kill too.
        SandboxLostError, SandboxClosedError: the sandbox is gone.
    """
    probe = await sandbox.exec(COUNT_PROCESSES, timeout_s=30, cwd="/")
    held = probe.stdout.strip()
    if probe.exit_code != 0 or probe.timed_out or not held.isdigit():
        problem = f"no command could start (exit {probe.exit_code}: {probe.output.strip()[-300:]})"
    elif pids_limit > 0 and int(held) > pids_limit - pid_reserve(pids_limit):
        problem = f"the agent's commands held {held} processes, of the sandbox's {pids_limit} pids"
    else:
        try:
            return await capture_patch(sandbox, repo, require_git, base=base), None
        except PatchError as exc:
            problem = f"patch capture failed ({exc})"
    try:
        what = f"killed {await sandbox.kill_leftovers()} processes the agent's commands left"
    except (SandboxLostError, SandboxClosedError):
        raise
    except SandboxError as exc:  # some survived the kill: the capture may work all the same
        what = f"killing the agent's leftover processes was incomplete ({exc})"
    try:
        patch = await capture_patch(sandbox, repo, require_git, base=base)
    except PatchError as exc:
        raise PatchError(f"{exc} (after {what}; before that: {problem})") from exc
    return patch, f"{problem}; {what}, then captured the patch"
