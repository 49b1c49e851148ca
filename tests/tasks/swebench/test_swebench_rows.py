"""SWE-bench instance rows as published (farm/tasks/swebench/rows.py): JSON lines, a JSON list,
Parquet; every malformed input is a TaskFormatError naming the file, the row or line, and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from farm.errors import TaskFormatError
from farm.tasks.swebench.rows import REQUIRED, check_row, is_rows_file, read_rows
from tests.shared import shared_path

TEST_LISTS = ("FAIL_TO_PASS", "PASS_TO_PASS")


def _verified() -> Path:
    return shared_path("fixtures", "swebench-verified", "swebench-verified.jsonl")


def _raw_rows(n: int | None = None) -> list[dict[str, Any]]:
    lines = [line for line in _verified().read_text(encoding="utf-8").splitlines() if line.strip()]
    return [json.loads(line) for line in lines[:n]]


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_500_verified_rows_read_whole_with_their_test_lists_decoded() -> None:
    raw = _raw_rows()
    rows = read_rows(_verified())
    assert len(rows) == len(raw) == 500
    assert len({r["instance_id"] for r in rows}) == 500
    assert len({r["repo"] for r in rows}) == 12
    for got, src in zip(rows, raw, strict=True):
        assert got["instance_id"] == src["instance_id"]
        # the dataset publishes the test lists as JSON strings; a row's are real lists
        assert isinstance(src["FAIL_TO_PASS"], str)
        assert got["FAIL_TO_PASS"] == json.loads(src["FAIL_TO_PASS"]) and got["FAIL_TO_PASS"]
        assert got["PASS_TO_PASS"] == json.loads(src["PASS_TO_PASS"])
        for key in ("repo", "base_commit", "patch", "test_patch", "problem_statement", "version",
                    "environment_setup_commit", "difficulty"):
            assert got[key] == src[key], (src["instance_id"], key)


def test_a_json_list_and_a_parquet_file_give_the_same_rows(tmp_path: Path) -> None:
    raw = _raw_rows(40)
    expected = read_rows(_jsonl(tmp_path / "rows.jsonl", raw))
    listed = tmp_path / "rows.json"
    listed.write_text(json.dumps(raw, indent=1), encoding="utf-8")
    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(raw), parquet)
    # Parquet as a Hugging Face export may hold it: the test lists as list<string> columns
    parquet_lists = tmp_path / "lists.parquet"
    pq.write_table(pa.Table.from_pylist([{**r, **{k: json.loads(r[k]) for k in TEST_LISTS}} for r in raw]),
                   parquet_lists)
    for path in (listed, parquet, parquet_lists):
        assert is_rows_file(path)
        assert read_rows(path) == expected, path.name
    assert not is_rows_file(tmp_path / "absent.jsonl") and not is_rows_file(tmp_path)


def test_test_lists_may_be_json_strings_or_lists() -> None:
    raw = _raw_rows(1)[0]
    as_list = {**raw, "FAIL_TO_PASS": json.loads(raw["FAIL_TO_PASS"]), "PASS_TO_PASS": []}
    as_text = {**raw, "PASS_TO_PASS": "[]"}
    assert check_row(as_list, "x")["FAIL_TO_PASS"] == check_row(as_text, "x")["FAIL_TO_PASS"]
    assert check_row(as_list, "x")["PASS_TO_PASS"] == check_row(as_text, "x")["PASS_TO_PASS"] == []


def test_a_numeric_version_becomes_a_string() -> None:
    raw = {**_raw_rows(1)[0], "version": 3}
    assert check_row(raw, "x")["version"] == "3"


def _bad_cases() -> list[tuple[str, Any, str]]:
    """(case id, how to spoil the second row, a phrase the error must hold)."""
    return [
        *[(f"missing-{key}", ("del", key), repr(key)) for key in REQUIRED],
        ("null-patch", ("set", "patch", None), "'patch'"),
        ("patch-not-text", ("set", "patch", ["diff"]), "'patch'"),
        ("id-not-text", ("set", "instance_id", 13401), "'instance_id'"),
        ("id-a-path", ("set", "instance_id", "../../escape"), "'instance_id'"),
        ("repo-without-owner", ("set", "repo", "django"), "'repo'"),
        ("f2p-not-json", ("set", "FAIL_TO_PASS", "test_a, test_b"), "'FAIL_TO_PASS'"),
        ("f2p-json-not-list", ("set", "FAIL_TO_PASS", '{"a": 1}'), "'FAIL_TO_PASS'"),
        ("p2p-not-names", ("set", "PASS_TO_PASS", [1, 2]), "'PASS_TO_PASS'"),
        ("p2p-a-number", ("set", "PASS_TO_PASS", 7), "'PASS_TO_PASS'"),
    ]


# a Parquet column holds one type: a row whose value has another type cannot be written there
_MIXED_TYPES = {"patch-not-text", "id-not-text", "p2p-not-names", "p2p-a-number"}
_BAD = [pytest.param(fmt, *case[1:], id=f"{fmt}-{case[0]}") for fmt in ("jsonl", "json", "parquet")
        for case in _bad_cases() if not (fmt == "parquet" and case[0] in _MIXED_TYPES)]


@pytest.mark.parametrize(("fmt", "spoil", "phrase"), _BAD)
def test_a_bad_row_names_the_file_the_row_and_the_field(tmp_path: Path, fmt: str, spoil: tuple, phrase: str) -> None:
    rows = _raw_rows(3)
    if spoil[0] == "del":
        del rows[1][spoil[1]]
    else:
        rows[1][spoil[1]] = spoil[2]
    path = tmp_path / f"rows.{fmt}"
    if fmt == "jsonl":
        _jsonl(path, rows)
    elif fmt == "json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(TaskFormatError) as err:
        read_rows(path)
    assert err.value.path == f"{path}: row 2"
    assert str(path) in str(err.value) and "row 2" in str(err.value) and phrase in str(err.value)


def test_a_duplicate_instance_id_names_the_second_row(tmp_path: Path) -> None:
    rows = _raw_rows(3)
    rows.append(dict(rows[0]))
    path = _jsonl(tmp_path / "rows.jsonl", rows)
    with pytest.raises(TaskFormatError, match=r"row 4: duplicate instance_id") as err:
        read_rows(path)
    assert str(path) in str(err.value) and rows[0]["instance_id"] in str(err.value)


def test_a_bad_json_line_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    good = [json.dumps(r) for r in _raw_rows(2)]
    path.write_text(f"{good[0]}\n\n{good[1]}\n{{\"instance_id\": \"x\",\n", encoding="utf-8")
    with pytest.raises(TaskFormatError, match="not a JSON line") as err:
        read_rows(path)
    assert err.value.path == f"{path}:4"  # blank lines count: the number is the file's own line


def test_a_row_that_is_not_an_object_is_named(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "rows.jsonl", [_raw_rows(1)[0], ["not", "a", "row"]])
    with pytest.raises(TaskFormatError, match="row 2: a row must be an object, got list"):
        read_rows(path)


@pytest.mark.parametrize(("name", "data"), [("rows.json", b"[{\"instance_id\": "),
                                            ("rows.parquet", b"PAR1 not parquet"), ("rows.jsonl", b"\xff\xfe\x00bad")])
def test_an_unreadable_file_is_a_format_error_naming_it(tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(TaskFormatError) as err:
        read_rows(path)
    assert err.value.path == str(path)
