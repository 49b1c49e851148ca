#!/bin/bash
# Reference fix: bound parameters everywhere, an allow-list for ORDER BY, escaped LIKE patterns.
set -euo pipefail
python3 - <<'PY'
from pathlib import Path
path = Path("notebook/store.py")
text = path.read_text()
start = text.index("    def get(self, owner, note_id):")
text = text[:start] + '''    def get(self, owner, note_id):
        note_id = _as_id(note_id)
        if note_id is None:
            return None
        row = self.conn.execute(
            "SELECT * FROM notes WHERE id = ? AND owner = ?", (note_id, owner)
        ).fetchone()
        return Note(**row) if row else None

    def search(self, owner, text="", order="created"):
        """Notes of ``owner`` whose title or body contains ``text`` (case-insensitive)."""
        if order not in ORDERINGS:
            raise ValueError(f"order must be one of {sorted(ORDERINGS)}, got {order!r}")
        pattern = "%" + _escape_like(text) + "%"
        rows = self.conn.execute(
            "SELECT * FROM notes WHERE owner = ? "
            "AND (title LIKE ? ESCAPE '\\\\' OR body LIKE ? ESCAPE '\\\\') "
            f"ORDER BY {ORDERINGS[order]}",
            (owner, pattern, pattern),
        ).fetchall()
        return [Note(**row) for row in rows]

    def delete(self, owner, note_id):
        note_id = _as_id(note_id)
        if note_id is None:
            return False
        cur = self.conn.execute("DELETE FROM notes WHERE id = ? AND owner = ?", (note_id, owner))
        self.conn.commit()
        return cur.rowcount == 1


def _as_id(note_id):
    if isinstance(note_id, bool):
        return None
    if isinstance(note_id, int):
        return note_id
    if isinstance(note_id, str) and note_id.strip().isdigit():
        return int(note_id)
    return None


def _escape_like(text):
    return text.replace("\\\\", "\\\\\\\\").replace("%", "\\\\%").replace("_", "\\\\_")
'''
path.write_text(text)
PY
