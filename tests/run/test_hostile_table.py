"""scripts/hostile_table.py: the hostile-actions suite's JSON into the table of docs/integrity.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import hostile_table as ht  # noqa: E402

CELLS = [
    {"action": "fork-bomb", "command": ":(){ :|:& };:", "backend": "local", "compat": "farm-safe",
     "status": "resolved", "exit_reason": "agent", "attempt": 1, "error_class": None, "sandbox_limits": ["pids"],
     "hostile_s": 7.25},
    {"action": "stderr-flood", "command": "head -c 300M /dev/zero >&2\nexit 0", "backend": "local",
     "compat": "farm-safe",
     "status": "unresolved", "exit_reason": "max_context_len", "attempt": 1, "error_class": None,
     "sandbox_limits": [], "hostile_s": 1.8},
    {"action": "fork-bomb", "command": ":(){ :|:& };:", "backend": "local", "compat": "leaf-2609",
     "status": "unresolved", "exit_reason": "agent", "attempt": 1, "error_class": "patch_capture_after_kill",
     "sandbox_limits": ["pids"], "hostile_s": 6.5},
]


def test_one_row_per_action_one_column_per_backend_and_rules() -> None:
    lines = ht.table(CELLS).splitlines()
    assert lines[0] == "| action | local (farm-safe) | local (leaf-2609) |"
    assert len(lines) == 2 + 2  # header, rule, two actions in the suite's order
    bomb, flood = lines[2], lines[3]
    assert bomb.startswith("| fork-bomb: `:(){ :\\|:& };:` |")  # a pipe in a command cannot split the row
    assert "resolved (agent), attempt 1; limits met: pids; hostile call 7.2 s" in bomb
    assert "unresolved (agent), attempt 1, `patch_capture_after_kill`; limits met: pids" in bomb
    assert "unresolved (max_context_len), attempt 1; limits met: none" in flood and flood.endswith("| not run |")
    assert flood.startswith("| stderr-flood: `head -c 300M /dev/zero >&2\\nexit 0` |")  # one line per row


def test_the_table_goes_between_the_markers(tmp_path: Path) -> None:
    results, doc = tmp_path / "results.json", tmp_path / "integrity.md"
    results.write_text(json.dumps({"cells": CELLS}))
    doc.write_text(f"before\n{ht.BEGIN}\nold table\n{ht.END}\nafter\n")
    assert ht.main([str(results), str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("before\n" + ht.BEGIN + "\n| action |") and text.endswith(ht.END + "\nafter\n")
    assert "old table" not in text
    doc.write_text("no markers\n")
    with pytest.raises(ValueError, match="hostile-table:begin"):
        ht.main([str(results), str(doc)])
    assert ht.main([str(tmp_path / "missing.json"), str(doc)]) == 2
