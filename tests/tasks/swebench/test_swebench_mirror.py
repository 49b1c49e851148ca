"""The repository mirror (farm/tasks/swebench/mirror.py) on repositories the test makes: entry
layouts, one-commit checkouts with no later history, missing commits named, and the version
setuptools-scm would give a commit in a full clone."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from farm.errors import ConfigError
from farm.tasks.swebench.mirror import MirrorError, RepoMirror

pytestmark = pytest.mark.tools("git")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, text: str) -> str:
    (repo / "f.txt").write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", text)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    repo = tmp_path / "origin"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    return repo


def _mirror(tmp_path: Path, origin: Path, layout: str = "bare") -> RepoMirror:
    root = tmp_path / "mirrors"
    root.mkdir(exist_ok=True)
    if layout == "bare":
        subprocess.run(["git", "clone", "-q", "--bare", str(origin), str(root / "o+calc")], check=True)
    elif layout == "repo-folder":  # what a snapshot fetch leaves: <entry>/repo
        subprocess.run(["git", "clone", "-q", "--bare", str(origin), str(root / "o+calc" / "repo")], check=True)
    elif layout == "bundle":
        _git(origin, "bundle", "create", str(root / "o+calc.bundle"), "--all")
    return RepoMirror.at(root)


@pytest.mark.parametrize("layout", ["bare", "repo-folder", "bundle"])
def test_checkout_is_one_commit_with_no_later_history(tmp_path: Path, origin: Path, layout: str) -> None:
    base = _commit(origin, "base")
    later = _commit(origin, "the fix")
    mirror = _mirror(tmp_path, origin, layout)
    dest = tmp_path / "testbed"
    mirror.checkout("o/calc", base, dest)
    assert (dest / "f.txt").read_text() == "base"
    assert _git(dest, "rev-parse", "HEAD") == base
    assert _git(dest, "rev-list", "--all", "--count") == "1"  # the fix is not one `git log --all` away
    assert subprocess.run(["git", "-C", str(dest), "cat-file", "-e", later], capture_output=True).returncode != 0
    assert _git(dest, "remote") == ""
    assert mirror.show("o/calc", later, "f.txt") == b"the fix"
    assert mirror.show("o/calc", base, "missing.txt") is None


def test_missing_repository_and_commit_are_named(tmp_path: Path, origin: Path) -> None:
    _commit(origin, "base")
    mirror = _mirror(tmp_path, origin)
    with pytest.raises(MirrorError, match=r"no repository for 'django/django'.*django\+django"):
        mirror.source("django/django")
    with pytest.raises(MirrorError, match="no commit 0{40}"):
        mirror.checkout("o/calc", "0" * 40, tmp_path / "x")
    with pytest.raises(ConfigError, match="benchmark.repos"):
        RepoMirror.at(tmp_path / "nowhere")


def test_scm_version_follows_the_tags_as_setuptools_scm_would(tmp_path: Path, origin: Path) -> None:
    untagged = _commit(origin, "a")
    tagged = _commit(origin, "b")
    _git(origin, "tag", "v1.2.0")
    _commit(origin, "c")
    _commit(origin, "d")
    three_on = _commit(origin, "e")
    _commit(origin, "e2")
    _git(origin, "tag", "2.0.dev")
    dev_two = [_commit(origin, "f"), _commit(origin, "g")][-1]
    _commit(origin, "g2")
    _git(origin, "tag", "3.0rc1")
    after_rc = _commit(origin, "h")
    mirror = _mirror(tmp_path, origin)
    assert mirror.scm_version("o/calc", untagged) is None
    assert mirror.scm_version("o/calc", tagged) == "1.2.0"
    assert mirror.scm_version("o/calc", three_on) == f"1.2.1.dev3+g{_short(origin, three_on, '1.2.0')}"
    assert mirror.scm_version("o/calc", dev_two) == f"2.0.dev2+g{_short(origin, dev_two)}"
    assert mirror.scm_version("o/calc", after_rc) is None  # a pre-release tag: no guess


def _short(repo: Path, commit: str, match: str = "*") -> str:
    return _git(repo, "describe", "--tags", "--long", "--match", f"*{match}*", commit).rsplit("-g", 1)[1]


# what setuptools-scm runs to find a version (its git backend's default describe command)
SCM_DESCRIBE = ("describe", "--dirty", "--tags", "--long", "--match", "*[0-9]*")


def test_the_one_commit_clone_describes_as_the_upstream_release(tmp_path: Path, origin: Path) -> None:
    _commit(origin, "a")
    _git(origin, "tag", "v1.2.0")
    _commit(origin, "b")
    base = _commit(origin, "c")
    later = _commit(origin, "the fix")
    _git(origin, "tag", "v1.3.0")  # a later release: neither its tag nor its commit may reach the image
    mirror = _mirror(tmp_path, origin)
    tag = mirror.version_tag("o/calc", base, "1.2")
    assert tag == "v1.2.0"  # what `git describe --tags` of a full clone names, not the row's series
    dest = tmp_path / "testbed"
    mirror.checkout("o/calc", base, dest, tag=tag)
    assert _git(dest, *SCM_DESCRIBE) == f"v1.2.0-0-g{_git(dest, 'rev-parse', '--short', base)}"
    assert _git(dest, "tag") == "v1.2.0" and _git(dest, "rev-list", "--all", "--count") == "1"
    assert subprocess.run(["git", "-C", str(dest), "cat-file", "-e", later], capture_output=True).returncode != 0
    # SWE-bench's setup_repo.sh ends with an empty commit, and its eval script changes files: the
    # describe still names the release, as in the harness's full clone
    _git(dest, "commit", "-q", "--allow-empty", "-m", "SWE-bench")
    (dest / "f.txt").write_text("patched")
    assert _git(dest, *SCM_DESCRIBE).startswith("v1.2.0-1-g") and _git(dest, *SCM_DESCRIBE).endswith("-dirty")


def test_without_a_version_tag_the_rows_version_names_the_tag(tmp_path: Path, origin: Path) -> None:
    base = _commit(origin, "a")
    _git(origin, "tag", "nightly")  # no digit: not a version tag, as setuptools-scm's --match says
    mirror = _mirror(tmp_path, origin)
    assert mirror.version_tag("o/calc", base, "7.0") == "7.0"
    assert mirror.version_tag("o/calc", base, "dev") is None and mirror.version_tag("o/calc", base) is None
    dest = tmp_path / "testbed"
    mirror.checkout("o/calc", base, dest, tag="7.0")
    assert _git(dest, *SCM_DESCRIBE).startswith("7.0-0-g")
    untagged = tmp_path / "untagged"
    mirror.checkout("o/calc", base, untagged)
    assert subprocess.run(["git", "-C", str(untagged), *SCM_DESCRIBE], capture_output=True).returncode != 0


def test_a_mirror_without_some_file_content_still_serves_the_commit_without_those_files(
        tmp_path: Path, origin: Path) -> None:
    # what a snapshot that left its largest file out holds: the commit and trees, not that blob
    (origin / "big.bin").write_bytes(b"\0" * 1000)
    (origin / "keep.txt").write_text("keep\n")
    base = _commit(origin, "base")
    root = tmp_path / "mirrors"
    root.mkdir()
    mirror_dir = root / "o+calc"
    subprocess.run(["git", "init", "-q", "--bare", str(mirror_dir)], check=True)
    _git(origin, "push", "-q", str(mirror_dir), "main")  # a small push lands as loose objects: one can go
    blob = _git(origin, "rev-parse", f"{base}:big.bin")
    (mirror_dir / "objects" / blob[:2] / blob[2:]).unlink()
    mirror = RepoMirror.at(root)
    assert mirror.missing_blobs("o/calc", base) == ["big.bin"]
    with pytest.raises(MirrorError, match="failed at git -C"):
        mirror.checkout("o/calc", base, tmp_path / "plain")
    dest = tmp_path / "sparse"
    mirror.checkout_without("o/calc", base, dest, ["big.bin"])
    assert _git(dest, "rev-parse", "HEAD") == base and not (dest / "big.bin").exists()
    assert (dest / "keep.txt").read_text() == "keep\n" and (dest / "f.txt").read_text() == "base"
    # what the recipes and farm's grading run on it: none needs the absent content
    for args in (["reset", "--hard", base], ["clean", "-fdx"], ["checkout", base]):
        _git(dest, *args)
    assert _git(dest, "status", "--porcelain") == "" and _git(dest, "rev-list", "--all") == base
    (dest / "keep.txt").write_text("edited\n")
    _git(dest, "add", "-A")
    assert _git(dest, "diff", "--cached", "--name-only") == "keep.txt"  # the absent file is no deletion
    assert mirror.missing_blobs("o/calc", base) == ["big.bin"] and _git(origin, "rev-parse", "HEAD") == base
