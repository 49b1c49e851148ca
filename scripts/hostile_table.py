"""Write the hostile-actions table (action x backend -> how the trial ended) into docs/integrity.md.

Reads build/hostile/results.json, which tests/run/test_hostile_actions.py writes each time it
runs, and replaces what lies between the two marker lines of docs/integrity.md (issue 40: the
table comes from the suite, not from a hand). Usage: ``python scripts/hostile_table.py [RESULTS]
[DOC]`` (``make hostile-table`` runs the suite first).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "build" / "hostile" / "results.json"
BEGIN = "<!-- hostile-table:begin (make hostile-table writes this) -->"
END = "<!-- hostile-table:end -->"


def cell_text(cell: dict) -> str:
    """One trial as the table shows it: status, exit reason, attempts, the limits it met, the time
    of its hostile call."""
    text = f"{cell['status']} ({cell['exit_reason']}), attempt {cell['attempt']}"
    if cell.get("error_class"):
        text += f", `{cell['error_class']}`"
    limits = ", ".join(cell.get("sandbox_limits") or []) or "none"
    return f"{text}; limits met: {limits}; hostile call {cell['hostile_s']:.1f} s"


def table(cells: list[dict]) -> str:
    """One row per action (in the suite's order), one column per backend and tool rules."""
    columns = sorted({(c["backend"], c["compat"]) for c in cells})
    actions = list(dict.fromkeys(c["action"] for c in cells))
    by = {(c["action"], c["backend"], c["compat"]): c for c in cells}
    lines = ["| action | " + " | ".join(f"{b} ({compat})" for b, compat in columns) + " |",
             "|---" * (len(columns) + 1) + "|"]
    for action in actions:
        row = [cell_text(by[(action, *col)]) if (action, *col) in by else "not run" for col in columns]
        # one table row: a pipe would split the cell, a newline the row
        command = next(c["command"] for c in cells if c["action"] == action).replace("|", "\\|").replace("\n", "\\n")
        lines.append(f"| {action}: `{command}` | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    results = Path(argv[0]) if argv else RESULTS
    doc_path = Path(argv[1]) if len(argv) > 1 else ROOT / "docs" / "integrity.md"
    try:
        cells = json.loads(results.read_text())["cells"]
    except (OSError, ValueError, KeyError) as exc:
        print(f"hostile_table: cannot read {results}: {exc} (run tests/run/test_hostile_actions.py first)",
              file=sys.stderr)
        return 2
    from integrity_table import render  # beside this file: the red team's table, same doc

    doc_path.write_text(render(doc_path.read_text(), table(cells), BEGIN, END))
    print(f"hostile_table: {len(cells)} cells into {doc_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
