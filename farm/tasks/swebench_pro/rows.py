"""SWE-bench Pro instance rows: JSON lines, a JSON list, Parquet, or CSV (what ``swe_bench_pro_eval.py``
reads as ``--raw_sample_path``).

The published rows keep every column a string: ``fail_to_pass``, ``pass_to_pass`` and
``selected_test_files_to_run`` are Python-literal lists in a string (both quote styles occur), so
they are decoded with :func:`ast.literal_eval` — never ``eval`` as the official script does — or
as JSON; real lists (an export that already decoded them, a Harbor copy's ``config.json``) pass
as they are. A row that lacks a field grading needs, or has it ill-typed, is an error naming the
file, the row and the field.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from farm.errors import TaskFormatError
from farm.tasks.swebench.rows import checked_rows, read_raw

REQUIRED = ("instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement",
            "fail_to_pass", "pass_to_pass", "before_repo_set_cmd", "selected_test_files_to_run")
OPTIONAL = ("requirements", "interface", "repo_language", "dockerhub_tag", "issue_specificity",
            "issue_categories")
LISTS = ("fail_to_pass", "pass_to_pass", "selected_test_files_to_run")
SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
# instance_<owner>__<repo>-<40-hex fix commit>[-v<40-hex>|-vnan]; the id names a directory, so
# nothing but a plain name is accepted
_ID = re.compile(r"^instance_[A-Za-z0-9][A-Za-z0-9._+-]*$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


def is_rows_file(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in SUFFIXES


def decode_list(value: Any, where: str, key: str) -> list[str]:
    """A list of strings from a list, a JSON list or a Python-literal list in a string.

    Raises:
        TaskFormatError: naming ``where`` and ``key`` when it is none of those.
    """
    if isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            try:
                value = ast.literal_eval(text)  # a literal only: no code runs
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                raise TaskFormatError(where, f"field {key!r} is a string but not a list: {text[:80]!r}") from None
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise TaskFormatError(where, f"field {key!r} must be a list of strings, got {type(value).__name__}")
    return value


def check_row(row: Any, where: str) -> dict[str, Any]:
    """The row with its lists decoded and only the known fields kept.

    Raises:
        TaskFormatError: naming ``where`` and the missing or ill-typed field.
    """
    if not isinstance(row, dict):
        raise TaskFormatError(where, f"a row must be an object, got {type(row).__name__}")
    for key in REQUIRED:
        if key not in row or row[key] is None:
            raise TaskFormatError(where, f"missing field {key!r}")
        if key not in LISTS and not isinstance(row[key], str):
            raise TaskFormatError(where, f"field {key!r} must be a string, got {type(row[key]).__name__}")
    iid = row["instance_id"]
    if not _ID.match(iid):
        raise TaskFormatError(where, f"field 'instance_id' must be instance_<owner>__<repo>-... (a plain name), "
                                     f"got {iid!r}")
    if "/" not in row["repo"]:
        raise TaskFormatError(where, f"field 'repo' must be owner/name, got {row['repo']!r}")
    if not _HEX40.match(row["base_commit"]):
        raise TaskFormatError(where, f"field 'base_commit' must be a 40-hex commit, got {row['base_commit']!r}")
    out = {k: row[k] for k in (*REQUIRED, *OPTIONAL) if k in row and row[k] is not None}
    for key in LISTS:
        out[key] = decode_list(row[key], where, key)
    for key in OPTIONAL:
        if key in out and not isinstance(out[key], str):
            raise TaskFormatError(where, f"field {key!r} must be a string, got {type(out[key]).__name__}")
    return out


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every row of ``path``, checked; a duplicate ``instance_id`` is an error.

    Raises:
        TaskFormatError: an unreadable file or a bad row (named by line/row number).
    """
    return checked_rows(path, read_raw(path, "SWE-bench Pro rows"), check_row)


def gold_checkout(row: dict[str, Any]) -> str:
    """The one line of ``before_repo_set_cmd`` the official grader runs: its last (the checkout of
    the test files from the fix commit)."""
    lines = row["before_repo_set_cmd"].strip().split("\n")
    return lines[-1].strip() if lines else ""


def instruction(row: dict[str, Any]) -> str:
    """What the agent is asked: the problem statement, then the requirements and the new
    interfaces when the row has them (the prompt the SWE-bench Pro paper describes)."""
    parts = [row["problem_statement"].rstrip()]
    if row.get("requirements", "").strip():
        parts.append("Requirements:\n" + row["requirements"].rstrip())
    if row.get("interface", "").strip():
        parts.append("New interfaces introduced:\n" + row["interface"].rstrip())
    return "\n\n".join(parts) + "\n"


def image_tag(row: dict[str, Any]) -> str:
    """The published instance image: the row's ``dockerhub_tag`` when it has one, else the rule of
    ``helper_code/image_uri.py`` (owner.repo lowercased, the id without ``instance_`` and ``-vnan``)."""
    tag = row.get("dockerhub_tag")
    if not tag:
        owner, name = row["repo"].lower().split("/", 1)
        rest = row["instance_id"][len("instance_"):]
        rest = rest[: -len("-vnan")] if rest.endswith("-vnan") else rest
        tag = f"{owner}.{name}-{rest}"[:128]
    return f"jefzda/sweap-images:{tag}"
