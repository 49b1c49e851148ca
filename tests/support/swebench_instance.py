"""A SWE-bench instance this test suite makes (the swebench package has none small enough to
build here): a small Python package with a bug, its SWE-bench-format row (issue text, gold patch,
test patch, FAIL_TO_PASS / PASS_TO_PASS, and — the package has no specs for a repository of our
own — its spec in the package's shape via the row's ``spec`` / ``log_parser_of`` fields) and a
bare mirror of its repository. Used by tests/benchmarks/test_swebench_path.py (gold and empty)
and the red team's ``swebench`` columns (tests/redteam).

The commits carry fixed dates, so the base commit — and with it the instance image's recipe —
is the same on every run: a second test in the session, or a later run, reuses the image
instead of building another 1.3 GB copy.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

INSTANCE_ID = "farmtest__calc-1"
BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
FIXED = BUGGY.replace("a - b", "a + b")
TESTS = "from calc import mul\n\n\ndef test_mul():\n    assert mul(3, 4) == 12\n"
TESTS_NEW = ("from calc import add, mul\n\n\ndef test_mul():\n    assert mul(3, 4) == 12\n\n\n"
             "def test_add():\n    assert add(2, 3) == 5\n")
SETUP = "from setuptools import setup\n\nsetup(name='calc', version='0.1', py_modules=['calc'])\n"
SPEC = {"python": "3.11", "packages": "pytest", "install": "python -m pip install -e .", "test_cmd": "pytest -rA"}
# one instant for every commit: the same tree gives the same hash on every run
_DATE = "2024-01-01T00:00:00+00:00"
_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
        "GIT_AUTHOR_DATE": _DATE, "GIT_COMMITTER_DATE": _DATE}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **_ENV}).stdout


def make_instance(tmp: Path) -> tuple[dict[str, Any], Path]:
    """The repository at its base commit under ``tmp``, a bare mirror of it (``<owner>+<name>``,
    as ``benchmark.repos`` wants) and the row; returns (row, mirror directory)."""
    repo = tmp / "calc"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(BUGGY)
    (repo / "setup.py").write_text(SETUP)
    # as every SWE-bench repository does: the install's egg-info is no part of anybody's patch
    (repo / ".gitignore").write_text("*.egg-info/\n__pycache__/\n")
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    _git(repo.parent, "init", "-q", "-b", "main", str(repo))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "calc")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc.py").write_text(FIXED)
    gold = _git(repo, "diff")
    _git(repo, "checkout", "-q", "calc.py")
    (repo / "tests" / "test_calc.py").write_text(TESTS_NEW)
    test_patch = _git(repo, "diff")
    _git(repo, "checkout", "-q", "tests/test_calc.py")
    mirror = tmp / "mirror"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(mirror / "farmtest+calc")], check=True)
    row = {"instance_id": INSTANCE_ID, "repo": "farmtest/calc", "base_commit": base, "version": "0.1",
           "environment_setup_commit": base, "patch": gold, "test_patch": test_patch,
           "problem_statement": "add() subtracts: add(2, 3) returns -1 instead of 5.",
           "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]),
           "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_mul"]),
           "spec": SPEC, "log_parser_of": "pytest-dev/pytest"}
    return row, mirror


def benchmark_overrides(rows: Path, mirror: Path, tmp: Path) -> list[str]:
    """The farm overrides that load ``rows`` as SWE-bench Verified with the mirror; no CPython
    prefix is given (the environment is Debian's python3.11)."""
    pythons = tmp / "no-pythons"
    pythons.mkdir(exist_ok=True)
    return ["benchmark=swebench-verified", f"benchmark.path={rows}", f"benchmark.repos={mirror}",
            f"benchmark.pythons={pythons}", f"benchmark.cache_dir={tmp / 'cache'}"]
