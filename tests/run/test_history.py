"""farm/grade/history.py on a real repository in a real (bubblewrap) sandbox: everything a leaky
benchmark image keeps beyond HEAD — another branch, a tag, a remote-tracking ref, a stash, notes,
a replace ref, ORIG_HEAD and the reflog — is gone, and HEAD's own work tree is untouched."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from farm.grade.history import HistoryStripError, should_seal, should_strip, strip_history
from farm.sandbox.local.sandbox import LocalSandbox
from farm.tasks.model import Environment, Task, VerifierSpec

pytestmark = [pytest.mark.bwrap, pytest.mark.tools("git")]

GIT = "git -c user.email=a@b -c user.name=a"
# base commit on main; the "fix" lives on a branch, a tag, origin/main, a stash, a note, a
# replace ref, ORIG_HEAD and in HEAD's reflog (checked out once, then left)
LEAKY = f"""set -e
cd /app && git init -q -b main . && echo bug > code.py && git add -A && {GIT} commit -qm base
git checkout -q -b fix && echo fixed > code.py && {GIT} commit -qam 'the fix' && fix=$(git rev-parse HEAD)
git tag v1 && git update-ref refs/remotes/origin/main $fix && git checkout -q main
echo wip > code.py && {GIT} stash -q && {GIT} notes add -m 'see fix' HEAD
git replace $(git rev-parse HEAD) $fix && git replace -d $(git rev-parse HEAD) >/dev/null
git update-ref refs/replace/$(git rev-parse HEAD) $fix && cp .git/refs/heads/fix .git/ORIG_HEAD
git remote add origin https://example.invalid/repo.git && git pack-refs --all
echo untracked > notes.txt && echo $fix > /tmp/fix-sha
"""


def _task(require_git_patch: bool = True) -> Task:
    return Task(benchmark="hist", task_id="t", instruction="", environment=Environment(workdir="/app"),
                verifier=VerifierSpec(), agent_network="no-network", verifier_network="no-network",
                require_git_patch=require_git_patch)


async def _sandbox(tmp_path: Path, setup: str) -> LocalSandbox:
    sb = LocalSandbox(_task(), root_dir=tmp_path / "sb")
    await sb.start()
    res = await sb.exec(setup, cwd="/")
    assert res.exit_code == 0, res.output
    return sb


async def test_only_history_reachable_from_head_survives(tmp_path: Path) -> None:
    sb = await _sandbox(tmp_path, LEAKY)
    try:
        fix = (await sb.read_file("/tmp/fix-sha")).decode().strip()
        assert (await sb.exec(f"git cat-file -e {fix}", cwd="/app")).exit_code == 0
        result = await strip_history(sb, "/app")
        # fix, v1, origin/main, stash, notes, replace + ORIG_HEAD
        assert result.repo and result.refs_removed == 7
        head = (await sb.exec("git rev-parse HEAD", cwd="/app")).stdout.strip()
        assert result.base_commit == head and len(head) == 40
        assert result.objects_removed >= 3  # at least the fix's commit, tree and blob
        listing = await sb.exec("git log --all --reflog --format=%s; git for-each-ref --format='%(refname)'; "
                                "git remote; git reflog", cwd="/app")
        assert listing.stdout == "base\nrefs/heads/main\n", listing.output
        missing = await sb.exec(f"git cat-file -e {fix}", cwd="/app")
        assert missing.exit_code != 0
        assert (await sb.exec("git fsck --full --no-dangling", cwd="/app")).exit_code == 0
        # the work tree the agent starts from is exactly what it was
        status = await sb.exec("git status --porcelain; git symbolic-ref HEAD; cat code.py", cwd="/app")
        assert status.stdout == "?? notes.txt\nrefs/heads/main\nbug\n"
        again = await strip_history(sb, "/app")
        assert (again.refs_removed, again.objects_removed) == (0, 0)
    finally:
        await sb.close()


async def test_a_detached_head_keeps_its_commit_and_a_non_repository_is_left_alone(tmp_path: Path) -> None:
    sb = await _sandbox(tmp_path, f"cd /app && git init -q -b main . && echo a > f && git add -A && "
                                  f"{GIT} commit -qm one && echo b > f && {GIT} commit -qam two && "
                                  "git checkout -q --detach HEAD~1 && mkdir -p /tmp/plain")
    try:
        result = await strip_history(sb, "/app")
        assert result.refs_removed == 1  # main, which is ahead of the detached HEAD
        log = await sb.exec("git log --all --reflog --format=%s; cat f", cwd="/app")
        assert log.stdout == "one\na\n"
        plain = await strip_history(sb, "/tmp/plain")
        assert not plain.repo and plain.refs_removed == 0
    finally:
        await sb.close()


async def test_a_failing_git_is_an_error_not_a_silent_success(tmp_path: Path) -> None:
    # a corrupt repository (HEAD's blob deleted from the object store): the prune cannot run
    sb = await _sandbox(tmp_path, f"cd /app && git init -q . && echo a > f && git add -A && {GIT} commit -qm one "
                                  "&& blob=$(git rev-parse HEAD:f) && rm .git/objects/${blob%${blob#??}}/${blob#??}")
    try:
        with pytest.raises(HistoryStripError, match="stripping the git history of /app failed"):
            await strip_history(sb, "/app")
    finally:
        await sb.close()


@pytest.mark.parametrize("mode, patch_graded, expected", [
    (None, True, True), (None, False, False), (True, False, True), (False, True, False)])
def test_auto_strips_only_tasks_graded_by_their_patch(mode: bool | None, patch_graded: bool, expected: bool) -> None:
    assert should_strip(replace(_task(), require_git_patch=patch_graded), mode) is expected


async def test_sealing_leaves_only_head_s_tree_and_drops_an_answer_from_its_ancestry(tmp_path: Path) -> None:
    # the red team's leaky image: the answer committed, then removed, all on HEAD's own branch
    sb = await _sandbox(tmp_path, f"cd /app && git init -q -b main . && echo fixed > answer.txt && git add -A && "
                                  f"{GIT} commit -qm answer && git rm -q answer.txt && echo seed > seed.txt && "
                                  f"git add -A && {GIT} commit -qm seed && echo wip >> seed.txt && echo new > new.txt")
    try:
        kept = await sb.exec("git log --format=%s; git show HEAD~1:answer.txt", cwd="/app")
        assert kept.stdout == "seed\nanswer\nfixed\n"  # what stripping alone leaves
        tree = (await sb.exec("git rev-parse 'HEAD^{tree}'", cwd="/app")).stdout.strip()
        result = await strip_history(sb, "/app", seal=True)
        assert result.sealed and result.objects_removed >= 2  # the old commits (the answer's blob too)
        after = await sb.exec("git log --all --reflog --format=%s; git rev-parse 'HEAD^{tree}' HEAD; "
                              "git rev-list --count HEAD; git symbolic-ref HEAD; git status --porcelain", cwd="/app")
        lines = after.stdout.splitlines()
        assert lines[0] == "history sealed by farm" and lines[1] == tree and lines[2] == result.base_commit
        # one commit, on the same branch, and the agent's work tree exactly as it was
        assert lines[3:] == ["1", "refs/heads/main", " M seed.txt", "?? new.txt"], after.output
        gone = await sb.exec("git log --all -p | grep -c fixed; git fsck --full --no-dangling", cwd="/app")
        assert gone.stdout.startswith("0\n"), gone.output
    finally:
        await sb.close()


@pytest.mark.parametrize("setting, patch_graded, instruction, expected", [
    (True, False, "Fix it.", True), (False, False, "Fix it.", False),
    # a patch-graded task's ancestry is the upstream's history before the base commit
    (True, True, "Fix it.", False),
    # a version-control task's history is the task
    (True, False, "Recover the commit with git.", False)])
def test_sealing_applies_to_tasks_whose_ancestry_is_no_part_of_the_work(setting: bool, patch_graded: bool,
                                                                        instruction: str, expected: bool) -> None:
    task = replace(_task(), require_git_patch=patch_graded, instruction=instruction)
    assert should_seal(task, setting) is expected
