"""SWE-bench instance rows as the dataset publishes them: JSON lines, a JSON list, or Parquet.

Each row must have the fields the evaluation needs; one that lacks one, or has the wrong type,
is an error naming the file, the row and the field. ``FAIL_TO_PASS``/``PASS_TO_PASS`` may be
lists or JSON-encoded lists (both are published).
"""

from __future__ import annotations

import csv
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from farm.errors import TaskFormatError

REQUIRED = ("instance_id", "repo", "base_commit", "version", "patch", "test_patch", "problem_statement",
            "FAIL_TO_PASS", "PASS_TO_PASS")
OPTIONAL = ("environment_setup_commit", "hints_text", "created_at", "difficulty")
# farm's extension for instances of repositories the swebench package has no specs for (a dataset
# of one's own, the tests): ``spec`` is that version's spec in the package's own shape, and
# ``log_parser_of`` names a repository whose log parser reads its test output (farm/tasks/swebench/spec.py)
EXTENSION = ("spec", "log_parser_of")
SUFFIXES = (".jsonl", ".json", ".parquet")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def is_rows_file(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in SUFFIXES


def read_raw(path: Path, what: str = "SWE-bench rows") -> list[Any]:
    """The raw rows of ``path``: Parquet, a JSON list, JSON lines or (SWE-bench Pro's official
    input) CSV, by suffix and content.

    Raises:
        TaskFormatError: an unreadable file, naming it (and the line of a bad JSON line).
    """
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as exc:  # noqa: BLE001 - any unreadable file is the same error to the user
            raise TaskFormatError(path, f"cannot read the Parquet rows: {exc}") from None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(path, f"cannot read {what}: {exc}") from None
    if suffix == ".csv":
        # patches and problem statements are long multi-line cells
        csv.field_size_limit(sys.maxsize)
        try:
            return list(csv.DictReader(text.splitlines(keepends=True)))
        except csv.Error as exc:
            raise TaskFormatError(path, f"not a CSV table: {exc}") from None
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TaskFormatError(path, f"not a JSON list: {exc}") from None
        return list(data)
    rows = []
    for no, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise TaskFormatError(f"{path}:{no}", f"not a JSON line: {exc}") from None
    return rows


def checked_rows(path: Path, raw: list[Any], check: Callable[[Any, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """``raw`` each passed through ``check`` (named by row number); a duplicate ``instance_id`` is an error.

    Raises:
        TaskFormatError: a bad row, named by its number.
    """
    rows, seen = [], set()
    for no, item in enumerate(raw, 1):
        row = check(item, f"{path}: row {no}")
        if row["instance_id"] in seen:
            raise TaskFormatError(f"{path}: row {no}", f"duplicate instance_id {row['instance_id']!r}")
        seen.add(row["instance_id"])
        rows.append(row)
    return rows


def _tests(value: Any, where: str, key: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise TaskFormatError(where, f"field {key!r} is a string but not a JSON list: {value[:80]!r}") from None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise TaskFormatError(where, f"field {key!r} must be a list of test names, got {type(value).__name__}")
    return value


def check_row(row: Any, where: str) -> dict[str, Any]:
    """The row with its test lists decoded.

    Raises:
        TaskFormatError: naming ``where`` and the missing or ill-typed field.
    """
    if not isinstance(row, dict):
        raise TaskFormatError(where, f"a row must be an object, got {type(row).__name__}")
    for key in REQUIRED:
        if key not in row or row[key] is None:
            raise TaskFormatError(where, f"missing field {key!r}")
        # only the version may come as a number (a Parquet export can type it so); an id or a
        # patch that is not text would fail later, far from the row
        types = (str, int, float) if key == "version" else str
        if key not in ("FAIL_TO_PASS", "PASS_TO_PASS") and not isinstance(row[key], types):
            raise TaskFormatError(where, f"field {key!r} must be a string, got {type(row[key]).__name__}")
    iid = row["instance_id"]
    # the id names the task's directory (farm/tasks/swebench/task_dir.py): no path may hide in it
    if not _ID.match(iid):
        raise TaskFormatError(where, f"field 'instance_id' must be a plain name (letters, digits, . _ + -), "
                                     f"got {iid!r}")
    out = {k: row[k] for k in (*REQUIRED, *OPTIONAL, *EXTENSION) if k in row and row[k] is not None}
    if ("spec" in out) != ("log_parser_of" in out):
        raise TaskFormatError(where, "fields 'spec' and 'log_parser_of' go together (an instance the swebench "
                                     "package has no specs for needs both)")
    if "spec" in out and not isinstance(out["spec"], dict):
        raise TaskFormatError(where, f"field 'spec' must be an object, got {type(out['spec']).__name__}")
    out["version"] = str(row["version"])
    if "/" not in str(row["repo"]):
        raise TaskFormatError(where, f"field 'repo' must be owner/name, got {row['repo']!r}")
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        out[key] = _tests(row[key], where, key)
    return out


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every row of ``path``, checked; a duplicate ``instance_id`` is an error.

    Raises:
        TaskFormatError: an unreadable file or a bad row (named by line/row number).
    """
    return checked_rows(path, read_raw(path), check_row)
