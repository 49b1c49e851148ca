"""The first offline blocker with a repository mirror the test makes (git): the requirements file
swebench 4.0.3 would download from GitHub is read from ``benchmark.repos`` while every socket is
refused, and a Harbor copy loaded through the config is converted as rows are."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import requests
from swebench.harness.test_spec import python as swebench_python

from farm.config import load_config
from farm.tasks.benchmark import load_benchmark_report
from farm.tasks.swebench import spec
from farm.tasks.swebench.mirror import MirrorError, RepoMirror
from tests.shared import shared_path
from tests.support.offline import refuse_network

pytestmark = pytest.mark.tools("git")

INSTANCE = "django__django-13401"
REQUIREMENT_LINES = ("asgiref >= 3.2.10", "farm-probe-package==1.2.3", "farm-included-package==9")


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_network(monkeypatch, "spec making")


def _git(cwd: Path, *args: str) -> str:
    res = subprocess.run(["git", "-c", "user.name=farm", "-c", "user.email=farm@example.invalid", *args],
                         cwd=cwd, capture_output=True, text=True, check=True)
    return res.stdout.strip()


@pytest.fixture
def mirror(tmp_path: Path) -> tuple[RepoMirror, str]:
    """``django+django`` holding tests/requirements/py3.txt (with a ``-r`` include) at one commit."""
    repo = tmp_path / "repos" / "django+django"
    (repo / "tests" / "requirements").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "tests" / "requirements" / "py3.txt").write_text(
        f"{REQUIREMENT_LINES[0]}\n{REQUIREMENT_LINES[1]}\n-e .\n# a comment\n-r extra.txt\n")
    (repo / "tests" / "requirements" / "extra.txt").write_text(f"{REQUIREMENT_LINES[2]}\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "requirements")
    return RepoMirror.at(tmp_path / "repos"), _git(repo, "rev-parse", "HEAD")


def _row(commit: str) -> dict[str, Any]:
    path = shared_path("fixtures", "swebench-verified", "swebench-verified.jsonl")
    line = next(ln for ln in path.read_text(encoding="utf-8").splitlines() if f'"{INSTANCE}"' in ln)
    return {**json.loads(line), "environment_setup_commit": commit}


def test_the_requirements_come_from_the_mirror_with_every_socket_refused(mirror: tuple[RepoMirror, str]) -> None:
    repos, commit = mirror
    made = spec.test_spec(_row(commit), repos)
    for line in REQUIREMENT_LINES:
        assert line in made.setup_env_script
    assert "-e ." not in made.setup_env_script and "a comment" not in made.setup_env_script
    assert "python -m pip install -r $HOME/requirements.txt" in made.setup_env_script
    assert swebench_python.requests is requests
    # what was served stays in the block: the package's own cache does not keep it for a later
    # call outside, and without the mirror the same commit is refused again
    assert swebench_python.get_requirements_by_commit.cache_info().currsize == 0
    with pytest.raises(spec.NetworkRefused, match="tests/requirements/py3.txt"):
        spec.test_spec(_row(commit), None)


def test_a_commit_the_mirror_lacks_is_named(mirror: tuple[RepoMirror, str]) -> None:
    repos, _ = mirror
    missing = "0" * 40
    with pytest.raises(MirrorError, match=f"no commit {missing}"):
        spec.test_spec(_row(missing), repos)
    assert swebench_python.requests is requests


def test_a_harbor_copy_through_the_config_is_graded_as_its_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_CACHE_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "swebench-verified"
    shutil.copytree(shared_path("fixtures", "harbor", "swebench-verified", INSTANCE), copy / INSTANCE)
    row = _row("unused")
    row.pop("environment_setup_commit")
    (copy / INSTANCE / "tests" / "config.json").write_text(json.dumps(row), encoding="utf-8")
    cfg = load_config(["benchmark=swebench-verified", f"benchmark.path={copy}", f"benchmark.repos={tmp_path}",
                       f"benchmark.cache_dir={tmp_path / 'tasks'}"])
    (task,) = load_benchmark_report(cfg.benchmark).tasks
    # written where rows write theirs: under benchmark.cache_dir, not $FARM_CACHE_DIR
    assert task.verifier.tests_dir.is_relative_to(tmp_path / "tasks" / "swebench-tasks")
    assert (task.benchmark, task.task_id) == ("swebench_verified", INSTANCE)
    assert (task.verifier.protocol, task.verifier_network) == ("swebench", "no-network")
    assert task.metadata["swebench_repos"] == str(tmp_path)
    assert "uv run" not in (task.verifier.tests_dir / "test.sh").read_text()
