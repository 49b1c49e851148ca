"""Capturing the agent's work as a git patch and applying it in a fresh sandbox (farm/grade/patch.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.grade import patch as gp
from farm.sandbox.local.sandbox import LocalSandbox
from farm.tasks.model import Environment, Task, VerifierSpec

pytestmark = [pytest.mark.bwrap, pytest.mark.tools("git")]

INIT = ("cd /app && git init -q . && printf 'one\\ntwo\\n' > a.txt && printf '\\x00\\x01bin' > b.bin && "
        "git add -A && git -c user.email=a@b -c user.name=a commit -qm init")
WORK = "cd /app && printf 'one\\nTWO\\n' > a.txt && echo new > 'new file.txt' && printf '\\x00\\x02bin' > b.bin"


def _task() -> Task:
    return Task(benchmark="grade", task_id="p", instruction="", environment=Environment(workdir="/app"),
                verifier=VerifierSpec(), agent_network="no-network", verifier_network="no-network")


async def _sandbox(tmp_path: Path, name: str, setup: str | None = INIT) -> LocalSandbox:
    sb = LocalSandbox(_task(), root_dir=tmp_path / name)
    await sb.start()
    if setup:
        r = await sb.exec(setup, cwd="/")
        assert r.exit_code == 0, r.output
    return sb


async def test_capture_takes_tracked_untracked_and_binary_changes_and_resets_the_index(tmp_path: Path) -> None:
    sb = await _sandbox(tmp_path, "a")
    try:
        assert (await sb.exec(WORK, cwd="/")).exit_code == 0
        patch = await gp.capture_patch(sb, "/app")
        assert "-two\n+TWO\n" in patch
        assert "diff --git a/new file.txt b/new file.txt" in patch and "+new\n" in patch
        assert "GIT binary patch" in patch
        # the index is back at HEAD: the verifier sees the workspace exactly as the agent left it
        status = (await sb.exec("git status --porcelain", cwd="/app")).stdout
        assert status.splitlines() == [" M a.txt", " M b.bin", '?? "new file.txt"'] or status.splitlines() == [
            " M a.txt", " M b.bin", "?? new file.txt"]
    finally:
        await sb.close()
    fresh = await _sandbox(tmp_path, "b")
    try:
        ok, out = await gp.apply_patch(fresh, "/app", patch)
        assert ok, out
        assert (await fresh.read_file("/app/a.txt")) == b"one\nTWO\n"
        assert (await fresh.read_file("/app/new file.txt")) == b"new\n"
        assert (await fresh.read_file("/app/b.bin")) == b"\x00\x02bin"
        assert (await fresh.exec(f"test -e {gp.PATCH_PATH}", cwd="/")).exit_code == 0
    finally:
        await fresh.close()


async def test_work_the_agent_committed_is_in_the_patch_taken_against_its_base(tmp_path: Path) -> None:
    sb = await _sandbox(tmp_path, "a")
    try:
        base = await gp.head_commit(sb, "/app")
        assert base is not None and len(base) == 40
        commit = WORK + " && git add -A && git -c user.email=a@b -c user.name=a commit -qm fix && echo more >> a.txt"
        assert (await sb.exec(commit, cwd="/")).exit_code == 0
        assert "-two" not in await gp.capture_patch(sb, "/app")  # against HEAD the commit is invisible
        patch = await gp.capture_patch(sb, "/app", base=base)
        assert "-two\n+TWO\n+more\n" in patch and "+new\n" in patch and "GIT binary patch" in patch
    finally:
        await sb.close()
    fresh = await _sandbox(tmp_path, "b")
    try:
        ok, out = await gp.apply_patch(fresh, "/app", patch)
        assert ok, out
        assert (await fresh.read_file("/app/a.txt")) == b"one\nTWO\nmore\n"
        assert await gp.head_commit(fresh, "/") is None  # not a work tree
    finally:
        await fresh.close()


async def test_no_changes_is_an_empty_patch_and_applies_as_such(tmp_path: Path) -> None:
    sb = await _sandbox(tmp_path, "a")
    try:
        assert await gp.capture_patch(sb, "/app") == ""
        assert await gp.apply_patch(sb, "/app", "") == (True, "empty patch")
        assert await gp.apply_patch(sb, "/app", "  \n") == (True, "empty patch")
        assert (await sb.exec(f"test -e {gp.PATCH_PATH}", cwd="/")).exit_code == 1  # nothing written
    finally:
        await sb.close()


async def test_a_patch_that_does_not_apply_reports_gits_output(tmp_path: Path) -> None:
    sb = await _sandbox(tmp_path, "a")
    bad = "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n-zzz\n+yyy\n two\n"
    try:
        ok, out = await gp.apply_patch(sb, "/app", bad)
        assert ok is False and "patch failed" in out  # stderr is merged into the output
        assert (await sb.read_file("/app/a.txt")) == b"one\ntwo\n"
    finally:
        await sb.close()


async def test_the_workdir_argument_is_used_not_the_sandbox_cwd(tmp_path: Path) -> None:
    sb = await _sandbox(tmp_path, "a", setup=INIT.replace("cd /app", "mkdir -p /app/sub && cd /app/sub"))
    try:
        assert await gp.is_git_worktree(sb, "/app/sub") is True
        assert await gp.is_git_worktree(sb, "/app") is False
        await sb.exec("echo more >> /app/sub/a.txt", cwd="/")
        assert "+more" in await gp.capture_patch(sb, "/app/sub")
    finally:
        await sb.close()


async def test_a_workdir_that_is_not_a_git_tree(tmp_path: Path) -> None:
    sb = await _sandbox(tmp_path, "a", setup=None)
    try:
        assert await gp.is_git_worktree(sb, "/app") is False
        with pytest.raises(gp.PatchError, match="/app is not a git work tree"):
            await gp.capture_patch(sb, "/app")
        assert await gp.capture_patch(sb, "/app", require_git=False) == ""
    finally:
        await sb.close()


async def test_the_git_directory_of_a_repository_is_not_a_work_tree(tmp_path: Path) -> None:
    # git answers "false" there with exit 0: the answer counts, not only the exit code
    sb = await _sandbox(tmp_path, "a")
    try:
        res = await sb.exec("git -C /app/.git rev-parse --is-inside-work-tree", cwd="/")
        assert (res.exit_code, res.stdout.strip()) == (0, "false")
        assert await gp.is_git_worktree(sb, "/app/.git") is False
        with pytest.raises(gp.PatchError, match="not a git work tree"):
            await gp.capture_patch(sb, "/app/.git")
    finally:
        await sb.close()


async def test_a_patch_holding_undecodable_bytes_as_surrogate_escapes_is_applied_byte_for_byte(
        tmp_path: Path) -> None:
    # a patch read from a file with errors="surrogateescape" (a Latin-1 text file, say) keeps
    # its raw bytes: they must reach git unchanged, not fail to encode
    sb = await _sandbox(tmp_path, "a")
    raw = (b"diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n"
           b" one\n-two\n+caf\xe9\n")
    try:
        ok, out = await gp.apply_patch(sb, "/app", raw.decode("utf-8", "surrogateescape"))
        assert ok, out
        assert (await sb.read_file("/app/a.txt")) == b"one\ncaf\xe9\n"
    finally:
        await sb.close()


async def test_a_failing_git_diff_is_a_patch_error(tmp_path: Path) -> None:
    sb = await _sandbox(tmp_path, "a")
    try:
        await sb.exec("echo garbage > /app/.git/index && echo x >> /app/a.txt", cwd="/")
        with pytest.raises(gp.PatchError, match=r"git diff failed \(exit [1-9]") as err:
            await gp.capture_patch(sb, "/app")
        assert "index" in str(err.value).split("): ", 1)[1]  # git's own words follow
    finally:
        await sb.close()


async def test_a_patch_over_the_cap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gp, "PATCH_CAP", 300)
    sb = await _sandbox(tmp_path, "a")
    try:
        await sb.exec("head -c 5000 /dev/zero | tr '\\0' x > /app/big.txt", cwd="/")
        with pytest.raises(gp.PatchError, match="patch larger than 300 bytes"):
            await gp.capture_patch(sb, "/app")
    finally:
        await sb.close()


def test_patch_error_is_a_farm_error() -> None:
    from farm.errors import FarmError

    assert issubclass(gp.PatchError, FarmError) and issubclass(gp.PatchError, RuntimeError)


async def test_a_non_utf8_text_change_survives_capture_and_apply(tmp_path: Path) -> None:
    sb = await _sandbox(tmp_path, "a")
    try:
        await sb.exec("printf 'caf\\xe9\\n' >> /app/a.txt", cwd="/")
        patch = await gp.capture_patch(sb, "/app")
    finally:
        await sb.close()
    fresh = await _sandbox(tmp_path, "b")
    try:
        ok, out = await gp.apply_patch(fresh, "/app", patch)
        assert ok, out
        assert (await fresh.read_file("/app/a.txt")) == b"one\ntwo\ncaf\xe9\n"
    finally:
        await fresh.close()


class _WithPath:
    """The real sandbox, with the PATH its commands see chosen by the test."""

    def __init__(self, sb: LocalSandbox, path: str) -> None:
        self._sb, self._path = sb, path

    async def exec(self, command: str, **kw):  # noqa: ANN003, ANN201
        kw["env"] = {**(kw.get("env") or {}), "PATH": self._path}
        return await self._sb.exec(command, **kw)


async def test_git_that_cannot_run_is_reported_as_such(tmp_path: Path) -> None:
    # exit 126 ("cannot execute") used to read as "not a work tree", which hid the real cause
    sb = await _sandbox(tmp_path, "a")
    try:
        r = await sb.exec("mkdir -p /tmp/nox && echo '#!/bin/sh' > /tmp/nox/git && chmod 644 /tmp/nox/git", cwd="/")
        assert r.exit_code == 0, r.output
        broken = _WithPath(sb, "/tmp/nox")  # bash skips a non-executable git when another one follows
        assert (await broken.exec("git --version", cwd="/")).exit_code == 126
        with pytest.raises(gp.PatchError, match=r"git could not run .*exit 126"):
            await gp.is_git_worktree(broken, "/app")
        with pytest.raises(gp.PatchError, match="exit 126"):
            await gp.capture_patch(broken, "/app")  # the real cause, not "not a git work tree"
        # where the task is graded in place, an agent that broke git is not an infra error
        assert await gp.capture_patch(broken, "/app", require_git=False) == ""
        # no git at all (127) still means "no work tree": such images grade in place
        no_git = _WithPath(sb, "/tmp/empty-path")
        assert (await no_git.exec("git --version", cwd="/")).exit_code == 127
        assert await gp.is_git_worktree(no_git, "/app") is False
        assert await gp.capture_patch(no_git, "/app", require_git=False) == ""
    finally:
        await sb.close()


async def test_untracked_files_the_image_had_stay_out_of_the_patch_unless_changed(tmp_path: Path) -> None:
    """An install's egg-info (untracked, not ignored) is in the image before the agent: it is no
    part of the agent's patch, which must apply in a fresh sandbox from the same image; a baseline
    file the agent changed, and a new file, are in it."""
    setup = INIT + " && mkdir pkg.egg-info && echo meta > pkg.egg-info/PKG-INFO && echo keep > 'old notes.txt'"
    sb = await _sandbox(tmp_path, "a", setup)
    try:
        await gp.record_untracked_baseline(sb, "/app")
        work = "cd /app && echo changed > 'old notes.txt' && echo fix > fix.txt && printf 'one\\nTWO\\n' > a.txt"
        assert (await sb.exec(work, cwd="/")).exit_code == 0
        patch = await gp.capture_patch(sb, "/app")
        assert "pkg.egg-info" not in patch
        assert "+changed" in patch and "diff --git a/fix.txt b/fix.txt" in patch and "+TWO" in patch
        status = (await sb.exec("git status --porcelain", cwd="/app")).stdout
        assert "?? pkg.egg-info/" in status.splitlines()  # the workspace itself is untouched
    finally:
        await sb.close()
    fresh = await _sandbox(tmp_path, "b", setup)
    try:
        ok, out = await gp.apply_patch(fresh, "/app", patch)
        assert ok, out
        assert (await fresh.read_file("/app/old notes.txt")) == b"changed\n"
    finally:
        await fresh.close()


async def test_without_a_baseline_every_untracked_file_is_in_the_patch(tmp_path: Path) -> None:
    sb = await _sandbox(tmp_path, "a", INIT + " && mkdir pkg.egg-info && echo meta > pkg.egg-info/PKG-INFO")
    try:
        assert "pkg.egg-info/PKG-INFO" in await gp.capture_patch(sb, "/app")
    finally:
        await sb.close()
