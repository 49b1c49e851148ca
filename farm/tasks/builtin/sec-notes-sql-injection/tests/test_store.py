import sqlite3
import unittest

from notebook import NoteStore, connect


class StoreTest(unittest.TestCase):
    def setUp(self):
        self.conn = connect()
        self.conn.executemany("INSERT INTO users VALUES (?, ?)",
                              [("ana", "hash-ana"), ("bo", "hash-bo"), ("admin", "s3cret-hash")])
        ticks = iter(range(100, 200))
        self.store = NoteStore(self.conn, clock=lambda: next(ticks))
        self.store.add("ana", "Groceries", "milk, eggs")                  # 1
        self.store.add("bo", "Bo's plan", "world domination")              # 2
        self.store.add("ana", "apple pie", "100% butter, 2_eggs")          # 3
        self.store.add("ana", "O'Brien meeting", "ask about the Q3 plan")  # 4

    def titles(self, notes):
        return [n.title for n in notes]

    # functionality

    def test_search_is_scoped_to_owner(self):
        self.assertEqual(self.titles(self.store.search("ana")), ["Groceries", "apple pie", "O'Brien meeting"])

    def test_search_text_case_insensitive(self):
        self.assertEqual(self.titles(self.store.search("ana", "PLAN")), ["O'Brien meeting"])

    def test_orderings(self):
        self.assertEqual(self.titles(self.store.search("ana", order="-created")),
                         ["O'Brien meeting", "apple pie", "Groceries"])
        self.assertEqual(self.titles(self.store.search("ana", order="title")),
                         ["apple pie", "Groceries", "O'Brien meeting"])

    def test_get_and_delete(self):
        self.assertEqual(self.store.get("ana", 1).title, "Groceries")
        self.assertIsNone(self.store.get("ana", 2))
        self.assertFalse(self.store.delete("ana", 2))
        self.assertTrue(self.store.delete("ana", 1))
        self.assertIsNone(self.store.get("ana", 1))

    def test_search_with_apostrophe(self):
        self.assertEqual(self.titles(self.store.search("ana", "O'Brien")), ["O'Brien meeting"])
        self.assertEqual(self.titles(self.store.search("bo", "bo's")), ["Bo's plan"])

    def test_wildcards_are_literal(self):
        self.assertEqual(self.titles(self.store.search("ana", "100%")), ["apple pie"])
        self.assertEqual(self.titles(self.store.search("ana", "2_e")), ["apple pie"])
        self.assertEqual(self.titles(self.store.search("ana", "%")), ["apple pie"])
        self.assertEqual(self.titles(self.store.search("ana", "_")), ["apple pie"])

    def test_owner_with_apostrophe(self):
        self.conn.execute("INSERT INTO users VALUES ('d''arcy', 'h')")
        self.store.add("d'arcy", "mine")
        self.assertEqual(self.titles(self.store.search("d'arcy")), ["mine"])

    # proof of concept: reading other users' data

    def test_poc_owner_injection(self):
        self.assertEqual(self.store.search("nobody' OR '1'='1"), [])
        self.assertIsNone(self.store.get("nobody' OR '1'='1", 2))

    def test_poc_text_injection(self):
        leaked = self.store.search("ana", "%') OR owner = 'bo' OR ('' = '")
        self.assertNotIn("Bo's plan", self.titles(leaked))
        union = "x%' UNION SELECT 0, name, password_hash, '', 0 FROM users --"
        self.assertEqual(self.store.search("ana", union), [])

    def test_poc_order_injection(self):
        probe = "(CASE WHEN (SELECT substr(password_hash, 1, 1) FROM users WHERE name = 'admin') = 's' THEN title ELSE created END)"
        with self.assertRaises(ValueError):
            self.store.search("ana", order=probe)
        with self.assertRaises(ValueError):
            self.store.search("ana", order="created; DROP TABLE notes")

    def test_poc_id_injection(self):
        self.assertIsNone(self.store.get("ana", "2 OR 1=1 --"))
        self.assertFalse(self.store.delete("ana", "0 OR 1=1 --"))
        self.assertEqual(len(self.store.search("bo")), 1)


if __name__ == "__main__":
    unittest.main()
