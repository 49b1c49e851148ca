"""scripts/integrity_table.py: the red-team JSON into the table between the markers of the doc."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import integrity_table as it  # noqa: E402

CELLS = [
    {"attack": "leftover_daemon", "grader": "harbor", "backend": "local", "outcome": "unresolved+flagged",
     "flags": ["verifier_files@verifier"]},
    {"attack": "honest", "grader": "harbor", "backend": "local", "outcome": "resolved", "flags": []},
    {"attack": "trojaned_python3", "grader": "harbor", "backend": "podman", "outcome": "flagged",
     "flags": ["system_tamper@verifier", "verifier_files@1"]},
    {"attack": "git_history_read", "grader": "harbor", "backend": "local", "outcome": "resolved", "flags": []},
    {"attack": "git_history_read", "grader": "harbor", "backend": "podman", "outcome": "unresolved", "flags": []},
]


def test_the_table_has_one_row_per_attack_and_one_column_per_grader_and_backend() -> None:
    holes = {("git_history_read", "harbor", "local"): "why", ("git_history_read", "harbor", "podman"): "why"}
    text = it.table(CELLS, holes)
    lines = text.splitlines()
    assert lines[0] == "| attack | harbor on local | harbor on podman |"
    assert lines[2].startswith("| honest solution (server left running) | **resolved, unflagged** | not run |")
    rows = {line.split(" | ")[0]: line for line in lines[2:]}
    assert "unresolved, flagged (`verifier_files`)" in rows["| `leftover_daemon`"]
    assert "resolved, flagged (out of the clean score) (`system_tamper`, `verifier_files`)" in \
        rows["| `trojaned_python3`"]
    # a cell KNOWN_HOLES admits is marked only where the attack got through
    assert rows["| `git_history_read`"].endswith("| **resolved, unflagged** — known hole | unresolved |")


def test_columns_go_local_podman_k8s_and_an_attack_that_does_not_apply_reads_a_dash() -> None:
    cells = [*CELLS, {"attack": "honest", "grader": "harbor", "backend": "k8s-emulator", "outcome": "resolved"},
             {"attack": "honest", "grader": "harbor-uv", "backend": "local", "outcome": "resolved"}]
    lines = it.table(cells, {}, {("harbor", "k8s-emulator"): ("honest",)}).splitlines()
    assert lines[0] == "| attack | harbor on local | harbor on podman | harbor on k8s-emulator | harbor-uv on local |"
    rows = {line.split(" | ")[0]: line for line in lines[2:]}
    assert rows["| `leftover_daemon`"].endswith("| not run | — | not run |")


def test_render_replaces_only_what_lies_between_the_markers() -> None:
    doc = f"before\n{it.BEGIN}\nold table\n{it.END}\nafter\n"
    out = it.render(doc, "new table")
    assert out == f"before\n{it.BEGIN}\nnew table\n{it.END}\nafter\n"
    assert it.render(out, "newer") == f"before\n{it.BEGIN}\nnewer\n{it.END}\nafter\n"
    with pytest.raises(ValueError, match="redteam-table"):
        it.render("no markers\n", "x")


def test_the_script_writes_the_doc_from_the_results_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"cells": CELLS}))
    doc = tmp_path / "integrity.md"
    doc.write_text(f"# x\n{it.BEGIN}\n{it.END}\n")
    assert it.main([str(results), str(doc)]) == 0
    assert "| `leftover_daemon` | unresolved, flagged (`verifier_files`) | not run |" in doc.read_text()
    assert it.main([str(tmp_path / "none.json"), str(doc)]) == 2
    assert "run the red-team suite first" in capsys.readouterr().err


def test_a_strict_column_follows_harbor_and_marks_an_admitted_flagged_pass_as_a_hole() -> None:
    cells = [*CELLS, {"attack": "git_history_read", "grader": "harbor (strict)", "backend": "local",
                      "outcome": "flagged", "flags": ["git_history@0"]},
             {"attack": "leftover_daemon", "grader": "harbor (strict)", "backend": "local",
              "outcome": "unresolved+flagged", "flags": ["verifier_files@verifier"]},
             {"attack": "honest", "grader": "harbor-uv", "backend": "local", "outcome": "resolved"}]
    holes = {("git_history_read", "harbor (strict)", "local"): "why"}
    lines = it.table(cells, holes).splitlines()
    assert lines[0] == "| attack | harbor on local | harbor on podman | harbor (strict) on local | harbor-uv on local |"
    rows = {line.split(" | ")[0]: line for line in lines[2:]}
    # under strict a flagged pass is a pass the strict score counts: marked where admitted
    assert "| resolved, flagged (out of the clean score) (`git_history`) — known hole |" in rows["| `git_history_read`"]
    assert "known hole" not in rows["| `leftover_daemon`"]
