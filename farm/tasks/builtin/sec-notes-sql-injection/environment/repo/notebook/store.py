import time
from dataclasses import dataclass

ORDERINGS = {
    "created": "created, id",
    "-created": "created DESC, id DESC",
    "title": "title COLLATE NOCASE, id",
}


@dataclass(frozen=True)
class Note:
    id: int
    owner: str
    title: str
    body: str
    created: int


class NoteStore:
    def __init__(self, conn, clock=time.time):
        self.conn = conn
        self.clock = clock

    def add(self, owner, title, body=""):
        cur = self.conn.execute(
            "INSERT INTO notes (owner, title, body, created) VALUES (?, ?, ?, ?)",
            (owner, title, body, int(self.clock())),
        )
        self.conn.commit()
        return cur.lastrowid

    def get(self, owner, note_id):
        row = self.conn.execute(
            f"SELECT * FROM notes WHERE id = {note_id} AND owner = '{owner}'"
        ).fetchone()
        return Note(**row) if row else None

    def search(self, owner, text="", order="created"):
        """Notes of ``owner`` whose title or body contains ``text`` (case-insensitive)."""
        order_sql = ORDERINGS.get(order, order)
        rows = self.conn.execute(
            f"SELECT * FROM notes WHERE owner = '{owner}' "
            f"AND (title LIKE '%{text}%' OR body LIKE '%{text}%') ORDER BY {order_sql}"
        ).fetchall()
        return [Note(**row) for row in rows]

    def delete(self, owner, note_id):
        cur = self.conn.execute(f"DELETE FROM notes WHERE id = {note_id} AND owner = '{owner}'")
        self.conn.commit()
        return cur.rowcount == 1
