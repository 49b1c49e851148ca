"""``benchmark=swebench-verified benchmark.path=FILE`` through the config: the rows become tasks
graded by the swebench rules; a rows file under another benchmark is refused; the mirror and
Python settings are execution-only (not in the config hash)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from farm.config import NOT_HASHED, config_hash, load_config
from farm.errors import ConfigError, TaskFormatError
from farm.tasks.benchmark import load_benchmark_report
from farm.tasks.model import Task
from tests.shared import shared_path

IDS = ["sympy__sympy-13480", "django__django-11603", "astropy__astropy-12907"]


@pytest.fixture(scope="module")
def raw_rows() -> dict[str, dict]:
    path = shared_path("fixtures", "swebench-verified", "swebench-verified.jsonl")
    rows = [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return {r["instance_id"]: r for r in rows}


def _tasks(tmp_path: Path, rows_file: Path, *extra: str) -> list[Task]:
    cfg = load_config(["benchmark=swebench-verified", f"benchmark.path={rows_file}",
                       f"benchmark.cache_dir={tmp_path / 'cache'}", *extra])
    return load_benchmark_report(cfg.benchmark).tasks


def test_selected_rows_load_as_swebench_tasks(tmp_path: Path, raw_rows: dict[str, dict]) -> None:
    rows_file = shared_path("fixtures", "swebench-verified", "swebench-verified.jsonl")
    tasks = _tasks(tmp_path, rows_file, f"benchmark.task_ids=[{','.join(IDS)}]")
    assert sorted(t.task_id for t in tasks) == sorted(IDS)
    for task in tasks:
        row = raw_rows[task.task_id]
        assert task.benchmark == "swebench_verified"
        # the problem statement, line endings aside: 252 of the 500 have CRLF ones, and
        # instruction.md is read with universal newlines as every Harbor task's is
        assert task.instruction == row["problem_statement"].replace("\r\n", "\n").replace("\r", "\n")
        assert task.verifier.protocol == "swebench" and task.verifier_network == "no-network"
        assert task.require_git_patch is True
        image = "swebench/sweb.eval.x86_64." + task.task_id.replace("__", "_1776_") + ":latest"
        assert task.environment.dockerfile is not None
        assert task.environment.dockerfile.read_text().splitlines()[0] == f"FROM {image}"
        assert task.environment.workdir == "/testbed"
        assert task.solution_dir is not None
        solve = (task.solution_dir / "solve.sh").read_text()
        assert "cd /testbed" in solve and "git apply" in solve and row["patch"].rstrip("\n") in solve
        assert task.metadata["swebench"]["FAIL_TO_PASS"] == json.loads(row["FAIL_TO_PASS"])
        assert task.source.revision.startswith("sha256:") and task.source.url == str(rows_file.resolve())


def test_jsonl_and_parquet_of_the_same_rows_give_the_same_tasks(tmp_path: Path, raw_rows: dict[str, dict]) -> None:
    chosen = [raw_rows[i] for i in IDS]
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in chosen), encoding="utf-8")
    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(chosen), parquet)
    a, b = _tasks(tmp_path, jsonl), _tasks(tmp_path, parquet)
    assert [(t.benchmark, t.task_id) for t in a] == [(t.benchmark, t.task_id) for t in b] == [
        ("swebench_verified", i) for i in IDS]
    for x, y in zip(a, b, strict=True):
        # the same content is written once: the same task directory serves both files
        assert x.path == y.path and x.metadata["swebench"] == y.metadata["swebench"]


def test_an_unknown_task_id_names_the_setting(tmp_path: Path) -> None:
    rows_file = shared_path("fixtures", "swebench-verified", "swebench-verified.jsonl")
    with pytest.raises(ConfigError, match=r"django__django-0.*'benchmark\.task_ids'"):
        _tasks(tmp_path, rows_file, "benchmark.task_ids=[django__django-0]")


def test_a_bad_row_stops_the_load_naming_the_row(tmp_path: Path, raw_rows: dict[str, dict]) -> None:
    rows_file = tmp_path / "rows.jsonl"
    bad = {**raw_rows[IDS[0]]}
    del bad["test_patch"]
    rows_file.write_text(json.dumps(raw_rows[IDS[1]]) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(TaskFormatError, match=r"rows\.jsonl: row 2: missing field 'test_patch'"):
        _tasks(tmp_path, rows_file)


def test_a_rows_file_under_another_benchmark_names_benchmark_path(tmp_path: Path) -> None:
    rows_file = shared_path("fixtures", "swebench-verified", "swebench-verified.jsonl")
    for name in ("builtin", "terminal-bench-2"):
        cfg = load_config([f"benchmark={name}", f"benchmark.path={rows_file}"])
        with pytest.raises(ConfigError, match=r"'benchmark\.path'.*swebench_verified"):
            load_benchmark_report(cfg.benchmark)


def test_a_missing_rows_file_names_benchmark_path(tmp_path: Path) -> None:
    cfg = load_config(["benchmark=swebench-verified", f"benchmark.path={tmp_path / 'absent.jsonl'}"])
    with pytest.raises(ConfigError, match=r"'benchmark\.path'"):
        load_benchmark_report(cfg.benchmark)


def test_the_mirror_and_pythons_do_not_change_the_config_hash(tmp_path: Path) -> None:
    assert {"benchmark.repos", "benchmark.pythons"} <= set(NOT_HASHED)
    base = ["benchmark=swebench-verified", f"benchmark.path={tmp_path / 'rows.jsonl'}"]
    plain = config_hash(load_config(base))
    assert config_hash(load_config([*base, "benchmark.repos=/srv/mirror", "benchmark.pythons=/opt/pythons"])) == plain
    # ... while what the run measures does
    assert config_hash(load_config([*base, "benchmark.task_ids=[sympy__sympy-13480]"])) != plain
