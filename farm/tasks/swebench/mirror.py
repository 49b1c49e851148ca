"""The local repository mirror a SWE-bench run builds its instances from (``benchmark.repos``).

One entry per source repository, named ``<owner>+<name>`` after the dataset's ``repo`` field
(``django/django`` -> ``django+django``): a bare repository, a checkout (its ``.git`` is used),
a directory holding either as ``repo`` (what a snapshot fetch leaves), or a git bundle
``<owner>+<name>.bundle``. A fork that holds the same commits serves as well (commit ids are
content hashes); link it under the upstream's name. Nothing is fetched: a missing repository or
commit is an error that names it.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from farm.errors import ConfigError


class MirrorError(ConfigError):
    """The mirror lacks a repository or a commit a row needs."""


def entry_name(repo: str) -> str:
    """``owner/name`` -> ``owner+name``."""
    return repo.replace("/", "+")


def _git_dir(path: Path) -> Path | None:
    for cand in (path, path / ".git", path / "repo", path / "repo" / ".git"):
        if (cand / "HEAD").is_file() and (cand / "objects").is_dir():
            return cand
    return None


def _git(git_dir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, timeout=timeout)


@dataclass(frozen=True)
class RepoMirror:
    root: Path

    @classmethod
    def at(cls, path: str | Path, key: str = "benchmark.repos") -> RepoMirror:
        """Raises: ConfigError naming ``key`` when ``path`` is not a directory."""
        root = Path(path).expanduser()
        if not root.is_dir():
            raise ConfigError(f"invalid value {str(path)!r} for '{key}': not a directory (expected one entry "
                              "per repository, named <owner>+<name>, e.g. django+django)")
        return cls(root.resolve())

    def source(self, repo: str) -> str:
        """What git can read ``repo`` from: a git directory, or a bundle file.

        Raises:
            MirrorError: no entry for ``repo``.
        """
        base = self.root / entry_name(repo)
        found = _git_dir(base) if base.is_dir() else None
        if found is not None:
            return str(found)
        bundle = self.root / f"{entry_name(repo)}.bundle"
        if bundle.is_file():
            return str(bundle)
        raise MirrorError(f"benchmark.repos={self.root}: no repository for {repo!r} (expected "
                          f"{base} as a bare repository, a checkout, or {bundle.name})")

    def _readable(self, repo: str) -> Path:
        """A git directory for ``repo`` (a bundle is unpacked once into ``.farm-bundles/``)."""
        src = Path(self.source(repo))
        if src.is_dir():
            return src
        into = self.root / ".farm-bundles" / entry_name(repo)
        if not (into / "HEAD").is_file():
            into.parent.mkdir(parents=True, exist_ok=True)
            res = subprocess.run(["git", "clone", "--bare", "--quiet", str(src), str(into)], capture_output=True)
            if res.returncode != 0:
                raise MirrorError(f"benchmark.repos: cannot read bundle {src}: {res.stderr.decode()[-300:]}")
        return into

    def require_commit(self, repo: str, commit: str, what: str = "base_commit") -> Path:
        """The git directory, after checking it holds ``commit``.

        Raises:
            MirrorError: naming the repository, the commit and the entry searched.
        """
        git_dir = self._readable(repo)
        if _git(git_dir, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
            raise MirrorError(f"benchmark.repos: {git_dir} has no commit {commit} ({what} of a {repo} instance); "
                              "bring in a mirror that holds it (a fork with the same history serves)")
        return git_dir

    def show(self, repo: str, commit: str, path: str) -> bytes | None:
        """The bytes of ``path`` at ``commit``; None when the commit lacks that file."""
        res = _git(self.require_commit(repo, commit, "environment_setup_commit"), "show", f"{commit}:{path}")
        return res.stdout if res.returncode == 0 else None

    def scm_version(self, repo: str, commit: str) -> str | None:
        """The version setuptools-scm would give ``commit`` in a full clone, from the mirror's tags
        (``4.5.0`` three commits on -> ``4.5.1.dev3+g58e6a09db``); None without a version tag.

        A one-commit checkout has no tags, so an install would call itself ``0.1.dev1`` — and a
        repository whose tests check its own version (pytest's tox.ini ``minversion``) fails."""
        res = _git(self._readable(repo), "describe", "--tags", "--long", "--match", "*[0-9]*", commit)
        m = re.fullmatch(r"v?(\d+(?:\.\d+)*)(\.dev\d*)?-(\d+)-g([0-9a-f]+)", res.stdout.decode().strip()) \
            if res.returncode == 0 else None
        if m is None:  # no tag, or a pre-release tag (rc, b): no guess rather than a wrong one
            return None
        tag, dev, distance, short = m.group(1), m.group(2), int(m.group(3)), m.group(4)
        if dev:  # a development tag (astropy's v5.1.dev): the distance is the dev number
            return f"{tag}.dev{distance}+g{short}"
        if distance == 0:
            return tag
        parts = tag.split(".")
        parts[-1] = str(int(parts[-1]) + 1)
        return f"{'.'.join(parts)}.dev{distance}+g{short}"

    def version_tag(self, repo: str, commit: str, version: str | None = None) -> str | None:
        """The tag an upstream ``git describe --tags`` names for ``commit`` (the mirror's nearest
        version tag, ``v1.2.0`` or ``5.1.dev``), else the row's ``version`` (``7.0``) where it is
        a version; None when neither is.

        setuptools-scm reads the version from ``git describe``: a one-commit clone without this
        tag installs as ``0.1.dev1+g…``, and pytest's own ``minversion`` then refuses to run any
        test (pytest-dev__pytest-10081 under the official harness)."""
        res = _git(self._readable(repo), "describe", "--tags", "--abbrev=0", "--match", "*[0-9]*", commit)
        tag = res.stdout.decode(errors="replace").strip() if res.returncode == 0 else ""
        if tag and subprocess.run(["git", "check-ref-format", f"refs/tags/{tag}"]).returncode == 0:
            return tag
        return version if version and re.fullmatch(r"\d+(\.\d+)*", version) else None

    def checkout(self, repo: str, commit: str, dest: Path, tag: str | None = None) -> None:
        """``dest`` becomes a one-commit clone of ``repo`` at ``commit``, on a branch, no remote,
        with ``tag`` (a lightweight tag) on that commit where given (:meth:`version_tag`).

        Only that commit's objects travel (a shallow fetch), so no later commit — the fix —
        is in the result's history.

        Raises:
            MirrorError: the commit is missing or git fails.
        """
        git_dir = self.require_commit(repo, commit)
        dest.mkdir(parents=True, exist_ok=True)
        upload = "git -c uploadpack.allowAnySHA1InWant=true upload-pack"
        steps = [
            ["git", "init", "--quiet", "-b", "main", str(dest)],
            ["git", "-C", str(dest), "fetch", "--quiet", "--depth=1", f"--upload-pack={upload}",
             f"file://{git_dir}", commit],
            ["git", "-C", str(dest), "reset", "--quiet", "--hard", commit],
            *([["git", "-C", str(dest), "tag", tag, commit]] if tag else []),
        ]
        for cmd in steps:
            res = subprocess.run(cmd, capture_output=True, timeout=1800)
            if res.returncode != 0:
                raise MirrorError(f"checking out {repo}@{commit} from {git_dir} failed at {' '.join(cmd[:4])}: "
                                  f"{res.stderr.decode(errors='replace')[-400:]}")

    def missing_blobs(self, repo: str, commit: str) -> list[str]:
        """The paths of ``commit``'s tree whose content the mirror lacks (a snapshot that left its
        largest files out); empty for a whole mirror."""
        git_dir = self.require_commit(repo, commit)
        tree = _git(git_dir, "ls-tree", "-r", commit).stdout.decode(errors="replace").splitlines()
        blobs = [(ln.split(None, 3)[2], ln.split("\t", 1)[1]) for ln in tree if ln.split(None, 2)[1:2] == ["blob"]]
        res = subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "--batch-check"], capture_output=True,
                             input="\n".join(sha for sha, _ in blobs).encode(), timeout=600)
        return [path for (_, path), line in zip(blobs, res.stdout.decode().splitlines()) if line.endswith(" missing")]

    def checkout_without(self, repo: str, commit: str, dest: Path, missing: list[str]) -> None:
        """:meth:`checkout` for a mirror that lacks the content of ``missing`` (paths of ``commit``):
        the same one-commit clone, its objects copied but those, and ``missing`` left out of the work
        tree by a sparse checkout, so that git's own commands (reset, clean, checkout, diff) never
        need them. The paths stay in the commit; only their content is absent.

        Raises:
            MirrorError: a tree, not only file content, is missing, or git fails.
        """
        git_dir = self.require_commit(repo, commit)
        listed = _git(git_dir, "rev-list", "--objects", "--missing=print", "--no-walk", commit).stdout.decode()
        objects = [ln.split()[0] for ln in listed.splitlines() if ln and not ln.startswith("?")]
        dest.mkdir(parents=True, exist_ok=True)
        pack = subprocess.run(["git", f"--git-dir={git_dir}", "pack-objects", "--stdout"], capture_output=True,
                              input="\n".join(objects).encode(), timeout=1800)
        steps: list[tuple[list[str], bytes | None]] = [
            (["git", "init", "--quiet", "-b", "main", str(dest)], None),
            (["git", "-C", str(dest), "index-pack", "--stdin"], pack.stdout),
            (["git", "-C", str(dest), "update-ref", "refs/heads/main", commit], None),
            (["git", "-C", str(dest), "config", "core.sparseCheckout", "true"], None),
        ]
        for cmd, data in steps:
            res = subprocess.run(cmd, capture_output=True, input=data, timeout=1800)
            if res.returncode != 0 or pack.returncode != 0:
                raise MirrorError(f"checking out {repo}@{commit} without {missing} failed at {' '.join(cmd[:4])}: "
                                  f"{(res.stderr or pack.stderr).decode(errors='replace')[-400:]}")
        (dest / ".git" / "shallow").write_text(commit + "\n")
        (dest / ".git" / "info").mkdir(exist_ok=True)
        (dest / ".git" / "info" / "sparse-checkout").write_text("/*\n" + "".join(f"!/{p}\n" for p in missing))
        res = subprocess.run(["git", "-C", str(dest), "read-tree", "-mu", "HEAD"], capture_output=True, timeout=1800)
        if res.returncode != 0:
            raise MirrorError(f"checking out {repo}@{commit} without {missing} failed: "
                              f"{res.stderr.decode(errors='replace')[-400:]} (a tree, not only file content, may be "
                              "missing from the mirror)")
