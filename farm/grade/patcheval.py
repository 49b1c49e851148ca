"""PatchEval Verified grading: the agent's patch, a fresh container, ``bash fix-run.sh``.

Resolved iff fix-run.sh exits 0: the Verified grader runs only the PoC script, with no
prepare.sh and no separate unit-test step. As the benchmark's evaluator does it
(``run_evaluation.py``): the candidate at /workspace/fix.patch, ending in a newline (an empty
one is a lone newline), then ``bash -lc 'cd /workspace && bash fix-run.sh'`` under the task's
600 s. The login shell matters: it reads the image's /etc/profile, where an image may put its
toolchain on PATH. The patch is applied in a *fresh*
sandbox from the same image because the agent's sandbox had the grader's payload removed
(``prepare_workspace``) and may have been tampered with.

Where the repository *is* /workspace, the payload (fix-run.sh, the PoC, ...) lies inside the
work tree the agent edits, so its patch may carry those files (:func:`screen_patch`): an
unchanged copy is dropped, a changed one refuses the patch (unresolved, ``apply_fail``) before
fix-run.sh runs, so a patch can never rewrite the grader that judges it.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from farm.sandbox.base import Sandbox
from farm.tasks.model import Task
from farm.tasks.patcheval import WORKSPACE, repo_candidates

FIX_PATCH = f"{WORKSPACE}/fix.patch"
GRADE_COMMAND = f"bash -lc 'cd {WORKSPACE} && bash fix-run.sh'"


@dataclass
class PatchEvalVerdict:
    resolved: bool
    reward: float
    exit_code: int
    timed_out: bool
    output: str
    failure_type: str | None  # apply_fail | compilation_fail | validation_fail | timeout | None
    verify_s: float


async def detect_repo(sandbox: Sandbox, task: Task) -> str:
    """The git root the agent should work in (first named candidate, else a unique .git below)."""
    quoted = " ".join(shlex.quote(c) for c in repo_candidates(task))
    script = (
        f"for d in {quoted}; do [ -e \"$d/.git\" ] && {{ echo \"$d\"; exit 0; }}; done; "
        f"find {WORKSPACE} -mindepth 2 -maxdepth 3 -name .git 2>/dev/null | sed 's#/.git$##'"
    )
    res = await sandbox.exec(script, timeout_s=60, cwd="/")
    found = [line for line in res.stdout.splitlines() if line.strip()]
    if res.exit_code == 0 and len(found) == 1:
        return found[0]
    raise RuntimeError(f"{task.task_id}: cannot locate the repository under {WORKSPACE}: {found or res.output[-300:]}")


async def prepare_workspace(sandbox: Sandbox, task: Task) -> str:
    """Agent phase: find the repo and remove the grader's payload from the agent's view."""
    repo = await detect_repo(sandbox, task)
    if repo == WORKSPACE:
        cmd = f"rm -f {shlex.quote(FIX_PATCH)}"
    else:
        top = repo[len(WORKSPACE) + 1:].split("/", 1)[0]
        cmd = (f"cd {WORKSPACE} && for e in * .[!.]* ..?*; do [ -e \"$e\" ] || continue; "
               f"[ \"$e\" = {shlex.quote(top)} ] || rm -rf -- \"$e\"; done")
    res = await sandbox.exec(cmd, timeout_s=120, cwd="/")
    if res.exit_code != 0:
        raise RuntimeError(f"{task.task_id}: hiding the grader payload failed: {res.output[-300:]}")
    return repo


_APPLY = re.compile(r"patch does not apply|corrupt patch|patch failed|can't find file to patch", re.I)
_COMPILE = re.compile(r"SyntaxError|IndentationError|TypeError: |^\S+\.go:\d+:\d+:", re.M)
# the evaluator's own rules per language (run_evaluation.py ``_error_type``)
_COMPILE_BY_LANGUAGE = {
    "Python": re.compile(r"SyntaxError|IndentationError"),
    "JavaScript": re.compile(r"SyntaxError|TypeError"),
    "Go": re.compile(r"^.*\.go:\d+:\d+: ", re.M),
}


def failure_type(output: str, exit_code: int, timed_out: bool = False, language: str | None = None) -> str | None:
    """PatchEval's own heuristic over the grader's log: with the task's ``language``, the
    evaluator's rule for it; without, any language's (farm's made tasks carry none)."""
    if timed_out:
        return "timeout"
    if exit_code == 0:
        return None
    if _APPLY.search(output):
        return "apply_fail"
    compile_error = _COMPILE_BY_LANGUAGE.get(language or "", _COMPILE)
    if compile_error.search(output) and not (language in (None, "Go") and "panic:" in output):
        return "compilation_fail"
    return "validation_fail"


def parse_grader_log(text: str) -> dict[str, Any]:
    """The verdict lines of an upstream PatchEval log (``[PoC RESULT]: True`` ...)."""
    def field(name: str) -> str | None:
        m = re.search(rf"^\[{re.escape(name)}\]:\s*(.*)$", text, re.M)
        return m.group(1).strip() if m else None

    def boolean(v: str | None) -> bool | None:
        return {"True": True, "False": False}.get(v or "")

    poc, unit = boolean(field("PoC RESULT")), boolean(field("UnitTest RESULT"))
    return {
        "poc_result": poc, "unittest_result": unit, "validation_type": field("Validation TYPE"),
        "poc_only_success": poc is True,
        "strict_success": poc is True and unit is not False,
    }


PAYLOAD_NAMES = ("fix-run.sh", "fix.patch")  # the grader's own files, wherever the repository is
_DIFF_HEAD = re.compile(r'^diff --git (?:"?a/(.*?)"?) (?:"?b/(.*?)"?)$')
_NEW_BLOB = re.compile(r"^index 0+\.\.([0-9a-f]{7,64})(?: \d+)?$", re.M)


def split_patch(patch: str) -> list[tuple[str, str]]:
    """(path, text) of each file's part of a git diff, in order (text before the first part is
    kept as a part with path "")."""
    parts = re.split(r"(?m)^(?=diff --git )", patch)
    out = []
    for part in parts:
        if not part:
            continue
        m = _DIFF_HEAD.match(part.split("\n", 1)[0])
        out.append((m.group(2) if m else "", part))
    return out


async def screen_patch(sandbox: Sandbox, repo: str, patch: str) -> tuple[str, list[str]]:
    """The patch without parts that merely re-add the grader's files unchanged, and the
    grader's files it would change: fix-run.sh and fix.patch anywhere in the work tree, and,
    where the repository is /workspace itself, every untracked file of the fresh image there.

    A changed part is named, not applied: a patch must not rewrite the grader that judges it.
    """
    q = shlex.quote(repo)
    names = " ".join(f"':(glob)**/{n}'" for n in PAYLOAD_NAMES)
    # below a nested repository the payload lies outside it (git apply refuses ../ paths)
    others = f"git -C {q} ls-files -z --others --exclude-standard; " if repo.rstrip("/") == WORKSPACE else ""
    res = await sandbox.exec(f"{others}git -C {q} ls-files -z --others --exclude-standard -- {names}; "
                             f"git -C {q} ls-files -z -- {names}", timeout_s=60, cwd="/")
    protected = {p for p in res.stdout.split("\0") if p}
    if not protected:
        return patch, []
    kept, changed = [], []
    for path, part in split_patch(patch):
        if path not in protected:
            kept.append(part)
            continue
        new = _NEW_BLOB.search(part)
        if new is not None:
            blob = await sandbox.exec(f"git -C {q} hash-object -- {shlex.quote(path)}", timeout_s=30, cwd="/")
            if blob.exit_code == 0 and blob.stdout.strip().startswith(new.group(1)):
                continue  # the image's own file, as the agent found it: not a change
        changed.append(path)
    return "".join(kept), changed


def with_trailing_newline(patch: str) -> str:
    """As the evaluator writes it: a newline added where the patch does not end in one (so an
    empty patch is a lone newline, which git apply refuses as it refuses nothing)."""
    return patch if patch.endswith("\n") else patch + "\n"


async def grade(
    make_sandbox: Callable[[Task, str], Sandbox | Awaitable[Sandbox]],
    task: Task,
    patch: str,
) -> PatchEvalVerdict:
    """Start a fresh verifier sandbox from the task image, apply ``patch`` via fix-run.sh."""
    t0 = time.monotonic()
    made = make_sandbox(task, "verifier")
    sandbox: Sandbox = await made if isinstance(made, Awaitable) else made  # type: ignore[assignment]
    try:
        await sandbox.start()
        patch, changed = await screen_patch(sandbox, await detect_repo(sandbox, task), patch)
        if changed:
            output = f"farm: the patch changes the grader's file(s) {', '.join(changed)}; refused, not applied\n"
            return PatchEvalVerdict(resolved=False, reward=0.0, exit_code=1, timed_out=False, output=output,
                                    failure_type="apply_fail", verify_s=time.monotonic() - t0)
        data = with_trailing_newline(patch).encode("utf-8", errors="surrogateescape")
        await sandbox.write_file(FIX_PATCH, data, 0o644)
        res = await sandbox.exec(GRADE_COMMAND, timeout_s=task.verifier_timeout_s, cwd=WORKSPACE,
                                 merge_stderr=True)
    finally:
        await sandbox.close()
    ok = res.exit_code == 0 and not res.timed_out
    return PatchEvalVerdict(
        resolved=ok, reward=1.0 if ok else 0.0, exit_code=res.exit_code, timed_out=res.timed_out,
        output=res.output,
        failure_type=failure_type(res.output, res.exit_code, res.timed_out, str(task.metadata.get("language") or "")
                                  or None),
        verify_s=time.monotonic() - t0,
    )
