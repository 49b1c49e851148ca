"""Issue 26's offline blockers, in process: making a spec or a task's verifier never reaches the
network (the requirement downloads of swebench 4.0.3 are refused without a mirror, any other URL
always), the generated tests/ fetch nothing, and a Harbor copy holding the row is graded as the
row is. The mirror-served spec is in test_swebench_offline_git.py (it runs git)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import requests
from swebench.harness.test_spec import python as swebench_python

from farm.tasks import catalog
from farm.tasks.harbor import load_harbor_tasks
from farm.tasks.loading import LoadedBenchmark
from farm.tasks.model import Source
from farm.tasks.swebench import spec
from farm.tasks.swebench.load import convert_harbor_copies, load_rows
from farm.tasks.swebench.rows import read_rows
from farm.tasks.swebench.task_dir import files_of
from tests.shared import shared_path
from tests.support.offline import refuse_network

COPY_ID = "django__django-13401"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_network(monkeypatch, "spec making")


@pytest.fixture(scope="module")
def verified() -> Path:
    return shared_path("fixtures", "swebench-verified", "swebench-verified.jsonl")


@pytest.fixture(scope="module")
def rows(verified: Path) -> list[dict[str, Any]]:
    return read_rows(verified)


def _row(rows: list[dict[str, Any]], instance_id: str) -> dict[str, Any]:
    return next(r for r in rows if r["instance_id"] == instance_id)


def test_a_spec_that_needs_a_requirements_file_without_a_mirror_is_refused_naming_it(
        rows: list[dict[str, Any]]) -> None:
    row = _row(rows, COPY_ID)
    assert spec.specs_of(row)["packages"] == "requirements.txt"
    with pytest.raises(spec.NetworkRefused) as err:
        spec.test_spec(row, None)
    assert "tests/requirements/py3.txt" in str(err.value) and row["environment_setup_commit"] in str(err.value)
    assert "benchmark.repos" in str(err.value)
    assert swebench_python.requests is requests  # restored after the refusal


def test_a_spec_that_needs_no_download_is_made_offline_without_a_mirror(rows: list[dict[str, Any]]) -> None:
    row = next(r for r in rows if r["repo"] == "sympy/sympy")
    made = spec.test_spec(row, None)
    assert made.instance_id == row["instance_id"] and ": '>>>>> Start Test Output'" in made.eval_script


@pytest.mark.parametrize("url", [
    "https://pypi.org/simple/django/",
    "https://github.com/django/django/archive/refs/heads/main.zip",
    "http://raw.githubusercontent.com/django/django/2ffef2bbbd4c4123ece05cdb815c20602191e6ad/setup.py",
    "https://raw.githubusercontent.com.attacker.example/django/django/2ffef2bb/setup.py",
    "https://raw.githubusercontent.com/django/django/main/tests/requirements/py3.txt",  # a branch, not a commit
])
def test_any_url_but_a_repository_file_at_a_commit_is_refused(url: str) -> None:
    with spec.served_from(None) as served:
        assert swebench_python.requests is served
        with pytest.raises(spec.NetworkRefused, match=re.escape(url)):
            swebench_python.requests.get(url, headers={})
    assert served.served == [] and swebench_python.requests is requests


def test_the_requests_module_is_restored_when_the_block_raises() -> None:
    with pytest.raises(KeyError), spec.served_from(None):
        assert swebench_python.requests is not requests
        raise KeyError("boom")
    assert swebench_python.requests is requests


_FETCHING = re.compile(r"\buv run\b|\buvx\b|\bcurl\b|\bwget\b|pip3? download|astral\.sh|https?://"
                       r"|git (fetch|clone|pull)\b|conda (install|create)|\bapt(-get)? ")
_HEREDOC = re.compile(r"(<<-?\s*'?(\w+)'?[^\n]*)\n(?:.*?\n)?\2(?:\n|$)", re.S)
_PIP_INSTALL = re.compile(r"pip3? install (.*)$")


def _commands(text: str) -> list[str]:
    """The script's own lines: heredoc bodies (the test patch, the gold patch) are data."""
    return [line.strip() for line in _HEREDOC.sub(r"\1\n", text).splitlines() if line.strip()]


def test_the_generated_tests_of_every_verified_row_fetch_nothing(rows: list[dict[str, Any]]) -> None:
    checked = 0
    for row in rows:
        files = files_of(row)
        assert set(files) >= {"tests/test.sh", "tests/eval.sh", "tests/config.json", "environment/Dockerfile"}
        for name in ("tests/test.sh", "tests/eval.sh", "environment/Dockerfile"):
            for line in _commands(files[name]):
                assert not _FETCHING.search(line), (row["instance_id"], name, line)
                # the spec re-installs the checkout itself (pip install -e .): never a named package
                pip = _PIP_INSTALL.search(line)
                if pip:
                    targets = [t for t in pip.group(1).split() if not t.startswith("-")]
                    local = [re.fullmatch(r"\.(\[[\w,-]+\])?", t) for t in targets]
                    assert targets and all(local), (row["instance_id"], line)
            checked += 1
        assert ": '>>>>> Start Test Output'" in files["tests/eval.sh"]
        assert json.loads(files["tests/config.json"])["instance_id"] == row["instance_id"]
    assert checked == 3 * 500


def test_a_heredoc_with_a_fetch_would_be_caught() -> None:
    # the stripping above must not hide the script's own commands
    fetch = "curl -LsSf https://astral.sh/uv/install.sh | sh"
    script = f"cat <<'EOF' > x\ncurl https://x\nEOF\ngit apply - <<'P'\nP\n{fetch}\n"
    assert _commands(script) == ["cat <<'EOF' > x", "git apply - <<'P'", fetch]
    assert _FETCHING.search(_commands(script)[-1])


def _harbor_copy(tmp_path: Path, row_raw: dict[str, Any] | None) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(shared_path("fixtures", "harbor", "swebench-verified", COPY_ID), root / COPY_ID)
    if row_raw is not None:
        (root / COPY_ID / "tests" / "config.json").write_text(json.dumps(row_raw, indent=2), encoding="utf-8")
    return root


def _raw_row(verified: Path, instance_id: str) -> dict[str, Any]:
    line = next(ln for ln in verified.read_text(encoding="utf-8").splitlines() if f'"{instance_id}"' in ln)
    return json.loads(line)


def _load_copy(root: Path) -> LoadedBenchmark:
    src = catalog.get_source("swebench_verified")
    return load_harbor_tasks([root / COPY_ID], src.name, defaults=src.harbor_defaults(), source=Source(url=str(root)))


def test_a_harbor_copy_holding_the_row_is_graded_as_the_row(tmp_path: Path, verified: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_CACHE_DIR", str(tmp_path / "cache"))
    raw = _raw_row(verified, COPY_ID)
    copy = _load_copy(_harbor_copy(tmp_path, raw))
    assert copy.tasks[0].verifier.protocol == "harbor"  # Harbor's own: uv run parser.py, a success marker
    assert "uv run parser.py" in (copy.tasks[0].verifier.tests_dir / "test.sh").read_text()
    (converted,) = convert_harbor_copies(copy, repos="/mirror", pythons="/pythons",
                                         cache_dir=str(tmp_path / "copy-cache")).tasks
    assert converted.verifier.tests_dir.is_relative_to(tmp_path / "copy-cache" / "swebench-tasks")

    rows_file = tmp_path / "rows.jsonl"
    rows_file.write_text(json.dumps(raw) + "\n", encoding="utf-8")
    (from_rows,) = load_rows(rows_file, catalog.get_source("swebench_verified"), select=None, repos="/mirror",
                             pythons="/pythons", cache_dir=str(tmp_path / "rows-cache")).tasks

    assert (converted.benchmark, converted.task_id) == (from_rows.benchmark, from_rows.task_id) == (
        "swebench_verified", COPY_ID)
    for task in (converted, from_rows):
        assert task.verifier.protocol == "swebench" and task.verifier_network == "no-network"
        assert task.verifier.success_marker is None
        assert task.metadata["swebench_repos"] == "/mirror" and task.metadata["swebench_pythons"] == "/pythons"
    assert converted.metadata["swebench"] == from_rows.metadata["swebench"]
    assert converted.metadata["swebench"]["FAIL_TO_PASS"] == json.loads(raw["FAIL_TO_PASS"])

    def tree(d: Path | None) -> dict[str, str]:
        assert d is not None
        return {p.name: p.read_text() for p in sorted(d.iterdir())}
    assert tree(converted.verifier.tests_dir) == tree(from_rows.verifier.tests_dir)
    assert "uv run" not in tree(converted.verifier.tests_dir)["test.sh"]
    assert tree(converted.solution_dir) == tree(from_rows.solution_dir)
    assert raw["patch"].rstrip("\n") in tree(converted.solution_dir)["solve.sh"]
    # the copy's own environment and limits stay
    assert converted.environment == copy.tasks[0].environment and converted.path == copy.tasks[0].path


@pytest.mark.parametrize("config", ["absent", "another-id", "not-json", "bad-row"])
def test_a_harbor_copy_without_its_row_stays_harbor(config: str, tmp_path: Path, verified: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_CACHE_DIR", str(tmp_path / "cache"))
    raw = {"absent": None, "another-id": _raw_row(verified, "django__django-11603"), "not-json": None,
           "bad-row": {**_raw_row(verified, COPY_ID), "FAIL_TO_PASS": "test_a, test_b"}}[config]
    root = _harbor_copy(tmp_path, raw)
    if config == "not-json":
        (root / COPY_ID / "tests" / "config.json").write_text("{not json", encoding="utf-8")
    copy = _load_copy(root)
    assert convert_harbor_copies(copy, repos=None, pythons=None).tasks == copy.tasks
