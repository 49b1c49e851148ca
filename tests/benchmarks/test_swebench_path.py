"""The whole SWE-bench path on an instance this test makes (issue 26 item 7): a SWE-bench-format
row for a small Python package with a bug (its issue text, gold patch, test patch,
FAIL_TO_PASS/PASS_TO_PASS, and — the swebench package has no specs for a repository of our own —
its spec in the package's shape via the row's ``spec``/``log_parser_of`` fields), the repository
in a mirror the test creates, the instance image built by farm's SWE-bench builder from the
package's own scripts under podman (Debian's python3.11: no CPython prefix is given), and
``farm run`` grading it by the package's evaluation script and log parser: the gold patch
resolves, the empty patch does not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from .standin import REPO, ensure_standins

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.tools("git")]

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
FIXED = BUGGY.replace("a - b", "a + b")
TESTS = "from calc import mul\n\n\ndef test_mul():\n    assert mul(3, 4) == 12\n"
TESTS_NEW = ("from calc import add, mul\n\n\ndef test_mul():\n    assert mul(3, 4) == 12\n\n\n"
             "def test_add():\n    assert add(2, 3) == 5\n")
SETUP = "from setuptools import setup\n\nsetup(name='calc', version='0.1', py_modules=['calc'])\n"
SPEC = {"python": "3.11", "packages": "pytest", "install": "python -m pip install -e .", "test_cmd": "pytest -rA"}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _instance(tmp: Path) -> tuple[dict, Path]:
    """The repository at its base commit, a bare mirror of it, and the row."""
    repo = tmp / "calc"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(BUGGY)
    (repo / "setup.py").write_text(SETUP)
    # as every SWE-bench repository does: the install's egg-info is no part of anybody's patch
    (repo / ".gitignore").write_text("*.egg-info/\n__pycache__/\n")
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    _git(repo.parent, "init", "-q", "-b", "main", str(repo))
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "calc")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc.py").write_text(FIXED)
    gold = _git(repo, "diff")
    _git(repo, "checkout", "-q", "calc.py")
    (repo / "tests" / "test_calc.py").write_text(TESTS_NEW)
    test_patch = _git(repo, "diff")
    _git(repo, "checkout", "-q", "tests/test_calc.py")
    mirror = tmp / "mirror"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(mirror / "farmtest+calc")], check=True)
    row = {"instance_id": "farmtest__calc-1", "repo": "farmtest/calc", "base_commit": base, "version": "0.1",
           "environment_setup_commit": base, "patch": gold, "test_patch": test_patch,
           "problem_statement": "add() subtracts: add(2, 3) returns -1 instead of 5.",
           "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]),
           "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_mul"]),
           "spec": SPEC, "log_parser_of": "pytest-dev/pytest"}
    return row, mirror


def _run(agent: str, rows: Path, mirror: Path, tmp: Path, env: dict) -> dict:
    store = tmp / f"store-{agent}"
    pythons = tmp / "no-pythons"  # none given: the environment is Debian's python3.11
    cmd = [sys.executable, "-m", "farm.cli", "run", "-q", f"agent={agent}", "benchmark=swebench-verified",
           f"benchmark.path={rows}", f"benchmark.repos={mirror}", f"benchmark.pythons={pythons}",
           f"benchmark.cache_dir={tmp / 'cache'}", "sandbox=docker", "sandbox.docker.engine=podman",
           "sandbox.image_policy=build", "sandbox.docker.pull=never", f"store.uri={store}", "run.executor=local"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=2400, cwd=REPO)
    rows_out = pq.read_table(store / "trials").to_pylist() if (store / "trials").exists() else []
    assert res.returncode == 0 and len(rows_out) == 1, (res.returncode, res.stderr[-3000:], rows_out)
    row = rows_out[0]
    verifier = next((store / "artifacts").rglob("verifier.txt")).read_text()
    return {"row": row, "verifier": verifier}


@pytest.mark.timeout(3000)
def test_gold_resolves_and_empty_does_not_on_a_made_instance(tmp_path: Path):
    env = ensure_standins("python:3.11-slim")  # the Debian bookworm root the SWE-bench base starts from
    row, mirror = _instance(tmp_path)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")

    # `farm images build` builds the instance stand-in (and the task image on it) ahead of the run
    pythons = tmp_path / "no-pythons"
    pythons.mkdir()
    build = subprocess.run([sys.executable, "-m", "farm.cli", "images", "build", "benchmark=swebench-verified",
                            f"benchmark.path={rows}", f"benchmark.repos={mirror}", f"benchmark.pythons={pythons}",
                            f"benchmark.cache_dir={tmp_path / 'cache'}", "sandbox.docker.engine=podman",
                            "sandbox.docker.pull=never"],
                           capture_output=True, text=True, env=env, timeout=2400, cwd=REPO)
    assert build.returncode == 0, (build.stdout[-2000:], build.stderr[-2000:])
    label = subprocess.run(["podman", "image", "inspect", "--format", '{{index .Labels "io.farm.standin"}}',
                            "docker.io/swebench/sweb.eval.x86_64.farmtest_1776_calc-1:latest"],
                           capture_output=True, text=True, env=env)
    assert label.stdout.strip() == "true", label

    gold = _run("oracle", rows, mirror, tmp_path, env)
    r = gold["row"]
    assert r["status"] == "resolved", (r["status"], r["error_class"], r["error"], gold["verifier"][-2000:])
    assert r["task_id"] == "farmtest__calc-1" and r["benchmark"] == "swebench_verified"
    assert r["base_image_standin"] is True  # the instance image is labelled a stand-in, and the row says so
    assert "[farm swebench] RESOLVED_FULL" in gold["verifier"]
    assert "FAIL_TO_PASS 1 passed / 0 failed" in gold["verifier"]

    empty = _run("nop", rows, mirror, tmp_path, env)
    r = empty["row"]
    assert r["status"] == "unresolved", (r["status"], r["error_class"], r["error"], empty["verifier"][-2000:])
    assert "[farm swebench] RESOLVED_NO" in empty["verifier"]
    assert "FAIL_TO_PASS 0 passed / 1 failed" in empty["verifier"]
