"""SWE-bench Pro rows as Scale publishes them (every column a string, lists as Python literals)
and as exports give them (real lists), in each file format the reader takes; bad rows are named."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from farm.errors import TaskFormatError
from farm.tasks.swebench_pro.rows import check_row, decode_list, gold_checkout, image_tag, instruction, read_rows

BASE = "f7234968d241d7171aadb1e873a67510753f3163"
FIX = "0ea40e09d1b35bcb69ff4d9cecf3d0defa4b36e8"
IID = f"instance_ansible__ansible-{FIX}-v30a923fb5c164d6cd18280c02422f75e611e8fb2"


def raw_row(**over: Any) -> dict[str, Any]:
    """A row in the published encoding: lists are Python literals in strings, mixed quotes."""
    row = {
        "instance_id": IID, "repo": "ansible/ansible", "base_commit": BASE,
        "patch": "diff --git a/x b/x\n", "test_patch": "diff --git a/t b/t\n",
        "problem_statement": "Combine vars replace is broken", "requirements": "- keep the API",
        "interface": "No new interfaces are introduced.", "repo_language": "python",
        "fail_to_pass": "['test/units/utils/test_vars.py::TestVariableUtils::test_combine_vars_replace']",
        "pass_to_pass": """["test/units/utils/test_vars.py::T::test_a", 'test/units/utils/test_vars.py::T::test_b']""",
        "before_repo_set_cmd": f"git reset --hard {BASE}\ngit clean -fd \ngit checkout {BASE} \n"
                               f"git checkout {FIX} -- test/units/utils/test_vars.py",
        "selected_test_files_to_run": "['test/units/utils/test_vars.py']",
        "issue_specificity": '["minor_bug"]', "issue_categories": '["core_feat"]',
        "dockerhub_tag": f"ansible.ansible-{IID[len('instance_'):]}",
    }
    row.update(over)
    return row


def test_python_literal_lists_with_mixed_quotes_are_decoded() -> None:
    row = check_row(raw_row(), "r")
    assert row["fail_to_pass"] == ["test/units/utils/test_vars.py::TestVariableUtils::test_combine_vars_replace"]
    assert row["pass_to_pass"] == ["test/units/utils/test_vars.py::T::test_a",
                                   "test/units/utils/test_vars.py::T::test_b"]
    assert row["selected_test_files_to_run"] == ["test/units/utils/test_vars.py"]


def test_a_list_string_is_read_as_a_literal_never_run() -> None:
    # the official script eval()s this column; here an expression is a bad value, not code
    with pytest.raises(TaskFormatError, match="'fail_to_pass' is a string but not a list"):
        decode_list("__import__('os').system('touch /tmp/farm-pro-pwned')", "r", "fail_to_pass")
    assert not Path("/tmp/farm-pro-pwned").exists()


@pytest.mark.parametrize("over,message", [
    ({"fail_to_pass": None}, "missing field 'fail_to_pass'"),
    ({"before_repo_set_cmd": 3}, "field 'before_repo_set_cmd' must be a string"),
    ({"pass_to_pass": "[1, 2]"}, "'pass_to_pass' must be a list of strings"),
    ({"instance_id": "../etc"}, "field 'instance_id' must be instance_"),
    ({"repo": "ansible"}, "field 'repo' must be owner/name"),
    ({"base_commit": "HEAD"}, "field 'base_commit' must be a 40-hex commit"),
    ({"interface": ["x"]}, "field 'interface' must be a string"),
])
def test_a_bad_row_names_its_field(over: dict[str, Any], message: str) -> None:
    row = raw_row(**over)
    if over.get("fail_to_pass", "") is None:
        del row["fail_to_pass"]
    with pytest.raises(TaskFormatError, match=message):
        check_row(row, "rows.jsonl: row 1")


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    suffix = path.suffix
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif suffix == ".json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    elif suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.json", "rows.csv", "rows.parquet"])
def test_every_format_gives_the_same_rows(tmp_path: Path, name: str) -> None:
    second = raw_row(instance_id=IID.replace("-v30a", "-v31a"))
    rows = read_rows(_write(tmp_path / name, [raw_row(), second]))
    assert [r["instance_id"] for r in rows] == [IID, second["instance_id"]]
    # a multi-line cell survives CSV quoting; the literal lists decode the same in each format
    assert rows[0]["before_repo_set_cmd"] == raw_row()["before_repo_set_cmd"]
    assert rows[1]["pass_to_pass"] == check_row(raw_row(), "r")["pass_to_pass"]


def test_an_export_with_real_lists_reads_as_the_published_strings(tmp_path: Path) -> None:
    decoded = check_row(raw_row(), "r")
    assert read_rows(_write(tmp_path / "rows.parquet", [decoded]))[0] == decoded


def test_a_duplicate_instance_is_named_with_its_row(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError, match=r"row 2.*duplicate instance_id"):
        read_rows(_write(tmp_path / "rows.jsonl", [raw_row(), raw_row()]))


def test_the_grader_runs_only_the_last_set_up_line() -> None:
    assert gold_checkout(check_row(raw_row(), "r")) == f"git checkout {FIX} -- test/units/utils/test_vars.py"


def test_the_instruction_is_statement_requirements_and_interface() -> None:
    text = instruction(check_row(raw_row(), "r"))
    assert text.index("Combine vars") < text.index("Requirements:\n- keep") < text.index("New interfaces introduced:")
    bare = instruction(check_row(raw_row(requirements="", interface=""), "r"))
    assert bare == "Combine vars replace is broken\n"


def test_the_image_is_the_rows_tag_or_the_official_rule() -> None:
    assert image_tag(check_row(raw_row(), "r")) == f"jefzda/sweap-images:ansible.ansible-{IID[9:]}"
    row = raw_row(instance_id="instance_qutebrowser__qutebrowser-" + "a" * 40 + "-vnan",
                  repo="qutebrowser/qutebrowser")
    del row["dockerhub_tag"]
    assert image_tag(check_row(row, "r")) == \
        "jefzda/sweap-images:qutebrowser.qutebrowser-qutebrowser__qutebrowser-" + "a" * 40
