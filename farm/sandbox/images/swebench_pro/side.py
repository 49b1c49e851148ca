"""The other GitHub repositories an instance's build fetches, served from local mirrors.

A recipe may reach GitHub beyond its own clone: git submodules (openlibrary's ``vendor/infogami``
and ``vendor/js/wmd``) and pip requirements of the form ``git+https://github.com/<owner>/<name>@<sha>``
(openlibrary's web.py). Each such repository that ``benchmark.repos`` holds is copied into the
image (``/opt/farm/mirrors/<owner>+<name>.git``, a few MB each) and git is told to fetch it from
there (``url.<mirror>.insteadOf``), so the recipe's own commands (``git submodule update``, ``make
git``, ``pip install -r requirements.txt``) run unchanged. A submodule whose commit no mirror holds
is not checked out (``submodule.<name>.update none``), so those commands do not fail on it; both
are recorded on the image.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from farm.tasks.swebench.mirror import MirrorError, RepoMirror, entry_name

MIRRORS_DIR = "/opt/farm/mirrors"
REQUIREMENTS = ("requirements.txt", "requirements_test.txt", "requirements-test.txt", "requirements-dev.txt")
_GITHUB = re.compile(r"(?:git\+)?https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?(?=[@#\s/]|$)", re.M)


@dataclass
class SideRepos:
    repos: list[str] = field(default_factory=list)  # owner/name served from a mirror copied in
    skipped: list[str] = field(default_factory=list)  # submodule names left unchecked-out
    notes: list[str] = field(default_factory=list)  # for the image's differences label

    def lines(self) -> list[str]:
        """The instance Dockerfile's lines that put the mirrors in place (after ``COPY app /app``)."""
        out = []
        if self.repos:
            config = ["git config --system protocol.file.allow always"]  # git >= 2.38 refuses file:// submodules
            for repo in self.repos:
                url = f"url.file://{MIRRORS_DIR}/{entry_name(repo)}.git.insteadOf"
                config += [f"git config --system --add {url} https://github.com/{repo}.git",
                           f"git config --system --add {url} https://github.com/{repo}"]
            out += [f"COPY mirrors/ {MIRRORS_DIR}/", "RUN " + " && ".join(config)]
        out += [f"RUN git -C /app config submodule.{name}.update none" for name in self.skipped]
        return out

    def stage(self, mirror: RepoMirror, ctx: Path) -> None:
        """Copy each mirror into the build context (bare clones)."""
        for repo in self.repos:
            dest = ctx / "mirrors" / f"{entry_name(repo)}.git"
            res = subprocess.run(["git", "clone", "--bare", "--quiet", mirror.source(repo), str(dest)],
                                 capture_output=True, timeout=1800)
            if res.returncode != 0:
                raise MirrorError(f"copying the mirror of {repo} failed: {res.stderr.decode(errors='replace')[-300:]}")


def _submodules(text: str) -> list[tuple[str, str, str]]:
    """(name, path, url) of each submodule a ``.gitmodules`` text names."""
    out, name, keys = [], None, {}
    for line in text.splitlines() + ["[end]"]:
        m = re.match(r'^\s*\[submodule "(.+)"\]\s*$', line)
        if m or line == "[end]":
            if name is not None and "path" in keys and "url" in keys:
                out.append((name, keys["path"], keys["url"]))
            name, keys = (m.group(1) if m else None), {}
            continue
        kv = re.match(r"^\s*(path|url)\s*=\s*(\S+)\s*$", line)
        if kv:
            keys[kv.group(1)] = kv.group(2)
    return out


def _gitlinks(git_dir: str, commit: str) -> dict[str, str]:
    res = subprocess.run(["git", f"--git-dir={git_dir}", "ls-tree", "-r", commit], capture_output=True, text=True)
    return {ln.split("\t", 1)[1]: ln.split()[2] for ln in res.stdout.splitlines() if ln.startswith("160000 ")}


def _has(mirror: RepoMirror, repo: str, commit: str | None = None) -> bool:
    try:
        if commit is None:
            mirror.source(repo)
        else:
            mirror.require_commit(repo, commit, "submodule commit")
    except MirrorError:
        return False
    return True


def side_repos(mirror: RepoMirror, repo: str, commit: str) -> SideRepos:
    """What ``repo`` at ``commit`` fetches from GitHub besides itself, and how it is served."""
    out = SideRepos()
    wanted: list[str] = []
    texts = [(mirror.show(repo, commit, name) or b"").decode(errors="replace") for name in REQUIREMENTS]
    for text in texts:
        wanted += [f"{o}/{n}" for o, n in _GITHUB.findall(text)]
    modules = _submodules((mirror.show(repo, commit, ".gitmodules") or b"").decode(errors="replace"))
    links = _gitlinks(mirror.source(repo), commit) if modules else {}
    for name, path, url in modules:
        m = _GITHUB.match(url)
        sub = f"{m.group(1)}/{m.group(2)}" if m else None
        sha = links.get(path)
        if sub is not None and sha is not None and _has(mirror, sub, sha):
            wanted.append(sub)
        else:
            out.skipped.append(name)
            out.notes.append(f"submodule {path} not checked out (no mirror holds {sub or url} at {sha or '?'})")
    for sub in dict.fromkeys(wanted):
        if sub != repo and _has(mirror, sub):
            out.repos.append(sub)
    if out.repos:
        out.notes.insert(0, "GitHub repositories the build fetches served from local mirrors: " + ", ".join(out.repos))
    return out
