"""The other GitHub repositories a Pro instance's build fetches (farm/sandbox/images/swebench_pro/side.py):
submodules and pip ``git+https`` requirements served from mirror copies, a submodule whose commit no
mirror holds left unchecked-out; and, through real git, that the lines it writes make ``git submodule
update`` and a ``git clone`` of the GitHub URL work with no network."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from farm.sandbox.images.swebench_pro.side import side_repos
from farm.tasks.swebench.mirror import RepoMirror

_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **_ENV}).stdout.strip()


def _repo(root: Path, name: str, files: dict[str, str]) -> tuple[Path, str]:
    repo = root / "work" / name
    _git(root, "init", "-q", "-b", "main", str(repo))
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", name)
    return repo, _git(repo, "rev-parse", "HEAD")


def _world(tmp_path: Path) -> tuple[RepoMirror, str, Path]:
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir()
    _, lib_sha = _repo(tmp_path, "lib", {"lib.py": "X = 1\n"})
    _, web_sha = _repo(tmp_path, "webpy", {"web.py": "W = 1\n"})
    for name in ("lib", "webpy"):
        subprocess.run(["git", "clone", "-q", "--bare", str(tmp_path / "work" / name),
                        str(mirrors / f"acme+{name}")], check=True)
    gitmodules = ('[submodule "vendor/lib"]\n\tpath = vendor/lib\n\turl = https://github.com/acme/lib.git\n'
                  '[submodule "vendor/gone"]\n\tpath = vendor/gone\n\turl = https://github.com/acme/gone.git\n')
    app, _ = _repo(tmp_path, "app", {".gitmodules": gitmodules,
                                     "requirements.txt": f"git+https://github.com/acme/webpy.git@{web_sha}#egg=web\n"})
    _git(app, "update-index", "--add", "--cacheinfo", f"160000,{lib_sha},vendor/lib")
    _git(app, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},vendor/gone")
    _git(app, "commit", "-qm", "submodules")
    base = _git(app, "rev-parse", "HEAD")
    subprocess.run(["git", "clone", "-q", "--bare", str(app), str(mirrors / "acme+app")], check=True)
    return RepoMirror.at(mirrors), base, app


def test_submodules_and_git_requirements_are_served_and_a_missing_commit_is_skipped(tmp_path: Path) -> None:
    mirror, base, _ = _world(tmp_path)
    side = side_repos(mirror, "acme/app", base)
    assert side.repos == ["acme/webpy", "acme/lib"]
    assert side.skipped == ["vendor/gone"]
    assert side.notes == ["GitHub repositories the build fetches served from local mirrors: acme/webpy, acme/lib",
                          f"submodule vendor/gone not checked out (no mirror holds acme/gone at {'1' * 40})"]
    lines = side.lines()
    assert lines[0] == "COPY mirrors/ /opt/farm/mirrors/"
    assert "git config --system --add url.file:///opt/farm/mirrors/acme+lib.git.insteadOf " \
           "https://github.com/acme/lib.git" in lines[1]
    assert lines[-1] == "RUN git -C /app config submodule.vendor/gone.update none"


def test_the_lines_make_the_recipes_own_git_commands_work_offline(tmp_path: Path) -> None:
    # what the Dockerfile does, with a global git config standing in for --system: the staged copies,
    # the insteadOf rules, update=none for the missing one; then the recipe's `git submodule update`
    # and pip's `git clone` of the GitHub URL succeed
    mirror, base, _ = _world(tmp_path)
    side = side_repos(mirror, "acme/app", base)
    ctx = tmp_path / "ctx"
    side.stage(mirror, ctx)
    served = tmp_path / "opt-mirrors"
    (ctx / "mirrors").rename(served)
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, **_ENV, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}
    app = tmp_path / "app"
    subprocess.run(["git", "clone", "-q", mirror.source("acme/app"), str(app)], check=True, env=env)
    for line in side.lines()[1:]:
        cmd = line.removeprefix("RUN ").replace("--system", "--global").replace("/opt/farm/mirrors", str(served))
        subprocess.run(["sh", "-c", cmd.replace("git -C /app", f"git -C {app}")], check=True, env=env)
    res = subprocess.run(["git", "-C", str(app), "submodule", "update", "--init", "--recursive"],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert (app / "vendor" / "lib" / "lib.py").read_text() == "X = 1\n"
    assert not (app / "vendor" / "gone").exists() or not any((app / "vendor" / "gone").iterdir())
    res = subprocess.run(["git", "clone", "-q", "https://github.com/acme/webpy.git", str(tmp_path / "w")],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0 and (tmp_path / "w" / "web.py").exists(), res.stderr
