import unittest

from notebook import NoteStore, connect


class StoreTest(unittest.TestCase):
    def setUp(self):
        self.conn = connect()
        self.conn.executemany("INSERT INTO users VALUES (?, ?)", [("ana", "x"), ("bo", "y")])
        ticks = iter(range(100, 200))
        self.store = NoteStore(self.conn, clock=lambda: next(ticks))
        self.store.add("ana", "Groceries", "milk, eggs")
        self.store.add("bo", "Bo's plan", "world domination")

    def test_search_is_scoped_to_owner(self):
        self.assertEqual([n.title for n in self.store.search("ana")], ["Groceries"])

    def test_get(self):
        self.assertEqual(self.store.get("ana", 1).title, "Groceries")
        self.assertIsNone(self.store.get("ana", 2))


if __name__ == "__main__":
    unittest.main()
