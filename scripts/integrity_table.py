"""Write the red-team table (attack x grader x backend -> outcome) into docs/integrity.md.

Reads build/redteam/results.json, which the red-team suite (tests/redteam) writes at the end of
each session, and replaces what lies between the two marker lines of docs/integrity.md. Cells no
session has run yet read "not run"; an attack that does not apply to a column (``APPLIES`` in
tests/redteam/attacks.py) reads "—". Usage: ``python scripts/integrity_table.py [RESULTS] [DOC]``
(``make integrity-table`` runs the suite first).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- redteam-table:begin (make integrity-table writes this) -->"
END = "<!-- redteam-table:end -->"
# what each outcome means for the clean score
# columns left to right: the plain grader first, backends from the simplest
BACKENDS = ("local", "podman", "k8s-emulator")
SHOWN = {"resolved": "**resolved, unflagged**", "flagged": "resolved, flagged (out of the clean score)",
         "unresolved": "unresolved", "unresolved+flagged": "unresolved, flagged"}


def table(cells: list[dict], known_holes: dict[tuple[str, str, str], str],
          applies: dict[tuple[str, str], tuple[str, ...]] | None = None) -> str:
    """The Markdown table of ``cells`` (one row per attack, one column per grader/backend);
    ``applies``: the attacks of a column where not all of them apply (the others read "—")."""
    applies = applies or {}
    columns = sorted({(c["grader"], c["backend"]) for c in cells},
                     key=lambda gb: (gb[0] != "harbor", gb[0], BACKENDS.index(gb[1]) if gb[1] in BACKENDS else 99,
                                     gb[1]))
    attacks = sorted({c["attack"] for c in cells}, key=lambda a: (a != "honest", a))
    by = {(c["attack"], c["grader"], c["backend"]): c for c in cells}
    head = "| attack | " + " | ".join(f"{g} on {b}" for g, b in columns) + " |"
    lines = [head, "|---" * (len(columns) + 1) + "|"]
    for attack in attacks:
        row = []
        for grader, backend in columns:
            cell = by.get((attack, grader, backend))
            if cell is None:
                row.append("—" if attack not in applies.get((grader, backend), (attack,)) else "not run")
                continue
            text = SHOWN.get(cell["outcome"], cell["outcome"])
            rules = sorted({f.split("@", 1)[0] for f in cell.get("flags") or []})
            if rules:
                text += " (" + ", ".join(f"`{r}`" for r in rules) + ")"
            # admitted, and it did get through (under strict, a flagged pass counts: strict admits none)
            through = ("resolved", "flagged") if grader.endswith("(strict)") else ("resolved",)
            if (attack, grader, backend) in known_holes and cell["outcome"] in through:
                text += " — known hole"
            row.append(text)
        name = "honest solution (server left running)" if attack == "honest" else f"`{attack}`"
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def render(doc: str, body: str, begin: str = BEGIN, end_marker: str = END) -> str:
    """``doc`` with the text between the markers replaced by ``body`` (the red team's markers
    unless told; scripts/hostile_table.py has its own).

    Raises:
        ValueError: the markers are missing or out of order."""
    start, end = doc.find(begin), doc.find(end_marker)
    if start < 0 or end < start:
        raise ValueError(f"docs/integrity.md lacks the lines {begin!r} ... {end_marker!r}")
    return doc[: start + len(begin)] + "\n" + body + "\n" + doc[end:]


def main(argv: list[str]) -> int:
    results = Path(argv[0]) if argv else ROOT / "build" / "redteam" / "results.json"
    doc_path = Path(argv[1]) if len(argv) > 1 else ROOT / "docs" / "integrity.md"
    try:
        cells = json.loads(results.read_text())["cells"]
    except (OSError, ValueError, KeyError) as exc:
        print(f"integrity_table: cannot read {results}: {exc} (run the red-team suite first)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from tests.redteam.attacks import APPLIES, KNOWN_HOLES, STRICT_HOLES

    doc_path.write_text(render(doc_path.read_text(), table(cells, KNOWN_HOLES | STRICT_HOLES, APPLIES)))
    print(f"integrity_table: {len(cells)} cells into {doc_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
