"""Remove the task repository's history that HEAD cannot reach, before the agent's first step.

Benchmark images often ship the upstream repository whole: the fix of the very issue the
agent is asked to solve sits in another branch, a tag, a remote-tracking ref, a stash or the
reflog, and an agent that runs ``git log --all`` can copy it (SWE-agent/mini-swe-agent#787
measured 21 % of trials doing so on SWE-bench Pro). The agent must see the repository at the
base commit and nothing after it: every ref except HEAD's own branch goes, the reflogs are
expired, the special heads (ORIG_HEAD, FETCH_HEAD …) are removed and the now unreachable
objects are pruned. What was removed is counted, so a row can say so.

Tasks whose repository history *is* the task (Terminal-Bench's ``fix-git`` recovers a commit
from the reflog) must keep it: ``benchmark.strip_history=null`` (the default) strips only
tasks graded by their git patch (SWE-bench-style sources, ``require_git_patch``). A kept history
is not thereby a free answer: unless the task says version control is its subject
(:func:`history_is_the_task`), the hack scan still flags reading it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from farm.sandbox.base import Sandbox
from farm.tasks.model import Task

# One shell program, so the whole strip is one round trip. $2 = 1 seals: HEAD becomes one root
# commit of HEAD's own tree (work tree and index untouched, as the tree is the same), before the
# reflogs expire and the prune drops the old ancestry. Counts go to stdout as key=value;
# `git` errors go to stderr and make the script fail (set -e), which the caller reports.
_SCRIPT = r"""
set -e
cd "$1"
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo repo=0; exit 0; }
gitdir=$(git rev-parse --git-dir)
objects() { git count-objects -v | awk '$1=="count:"||$1=="in-pack:"{n+=$2} END{print n+0}'; }
before=$(objects)
keep=$(git symbolic-ref -q HEAD || true)
removed=0
for r in $(git for-each-ref --format='%(refname)'); do
  if [ "$r" != "$keep" ]; then git update-ref -d "$r"; removed=$((removed+1)); fi
done
for remote in $(git remote); do git remote remove "$remote"; done
sealed=0
if [ "$2" = 1 ] && git rev-parse -q --verify HEAD >/dev/null; then
  root=$(git -c user.name=farm -c user.email=farm@localhost commit-tree "HEAD^{tree}" -m "history sealed by farm")
  git update-ref HEAD "$root"
  sealed=1
fi
for h in ORIG_HEAD FETCH_HEAD MERGE_HEAD CHERRY_PICK_HEAD REVERT_HEAD AUTO_MERGE BISECT_HEAD; do
  if [ -e "$gitdir/$h" ]; then rm -f "$gitdir/$h"; removed=$((removed+1)); fi
done
rm -rf "$gitdir/logs/refs/stash" "$gitdir/refs/original" "$gitdir/worktrees"
git reflog expire --expire=now --expire-unreachable=now --all
# objects borrowed from another repository (alternates) are copied in, then the link dropped,
# so the prune below cannot leave HEAD's own objects missing
if [ -s "$gitdir/objects/info/alternates" ]; then git repack -a -d -q; rm -f "$gitdir/objects/info/alternates"; fi
git -c gc.auto=0 -c gc.reflogExpire=now -c gc.reflogExpireUnreachable=now gc --prune=now --quiet
echo repo=1 sealed=$sealed refs_removed=$removed objects_before=$before objects_after=$(objects) \
  head=$(git rev-parse -q --verify HEAD || echo none)
"""


@dataclass(frozen=True)
class StripResult:
    repo: bool  # the workdir was a git work tree
    refs_removed: int = 0  # refs, remotes' refs and special heads deleted
    objects_removed: int = 0  # objects the prune dropped (loose + packed)
    base_commit: str | None = None  # HEAD the agent starts from (the hack scan's "not foreign" commit)
    sealed: bool = False  # HEAD's own ancestry was squashed into one commit


# Terminal-Bench's own labels for tasks about version control (fix-git, git-multibranch,
# sanitize-git-repo, git-leak-recovery, configure-git-webserver carry one of them)
_VCS_TAGS = frozenset({"git", "version-control", "version control", "vcs"})
_VCS_WORDS = re.compile(r"\b(git|reflog)\b", re.IGNORECASE)


def history_is_the_task(task: Task) -> bool:
    """Whether reading the repository's history is part of the work: the task's metadata tags it
    as a version-control task, or its instruction names git. fix-git's instruction never says
    "git" (its tag does), so the instruction alone is not enough; a task with neither, whose
    history still holds the answer (an image built from the fixed repository), is one where a
    history read is a shortcut, and the scan flags it."""
    tags = task.metadata.get("tags") or ()
    if isinstance(tags, str):
        tags = (tags,)
    if any(str(t).strip().lower() in _VCS_TAGS for t in tags):  # type: ignore[union-attr]
        return True
    return bool(_VCS_WORDS.search(task.instruction))


def should_strip(task: Task, setting: bool | None) -> bool:
    """``None`` (auto): only tasks graded by their repository patch (their history may hold the fix)."""
    return task.require_git_patch if setting is None else setting


def should_seal(task: Task, setting: bool) -> bool:
    """``benchmark.seal_history``: squash HEAD's ancestry where it is not the upstream's history
    before a patch's base (patch-graded tasks) and not the task itself (version control)."""
    return setting and not task.require_git_patch and not history_is_the_task(task)


async def strip_history(sandbox: Sandbox, workdir: str, *, seal: bool = False, timeout_s: float = 600) -> StripResult:
    """Leave the repository at ``workdir`` with only the history reachable from HEAD; with
    ``seal``, with only HEAD itself (one root commit of HEAD's tree).

    Raises:
        HistoryStripError: a git command failed (the repository is then in an unknown state,
            so the trial must not start).
    """
    command = f"sh -c {shlex.quote(_SCRIPT)} strip {shlex.quote(workdir)} {int(seal)}"
    res = await sandbox.exec(command, timeout_s=timeout_s, cwd="/", output_cap=64 << 10)
    if res.exit_code != 0 or res.timed_out:
        raise HistoryStripError(f"stripping the git history of {workdir} failed (exit {res.exit_code}): "
                                f"{res.output[-800:]}")
    fields = dict(part.split("=", 1) for part in res.stdout.split() if "=" in part)
    if fields.get("repo") != "1":
        return StripResult(repo=False)
    before, after = int(fields["objects_before"]), int(fields["objects_after"])
    head = fields.get("head")
    return StripResult(repo=True, refs_removed=int(fields["refs_removed"]), objects_removed=max(before - after, 0),
                       base_commit=None if head in (None, "none") else head, sealed=fields.get("sealed") == "1")


class HistoryStripError(RuntimeError):
    pass
