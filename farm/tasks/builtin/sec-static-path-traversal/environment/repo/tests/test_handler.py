import os
import tempfile
import unittest

from staticsrv import handle


class HandlerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = os.path.join(self.tmp.name, "site")
        os.makedirs(os.path.join(self.root, "docs"))
        with open(os.path.join(self.root, "index.html"), "w") as fh:
            fh.write("<h1>home</h1>")
        with open(os.path.join(self.root, "docs", "guide.txt"), "w") as fh:
            fh.write("read me")

    def tearDown(self):
        self.tmp.cleanup()

    def test_index(self):
        response = handle(self.root, "/")
        self.assertEqual((response.status, response.body), (200, b"<h1>home</h1>"))

    def test_nested_file(self):
        response = handle(self.root, "/docs/guide.txt")
        self.assertEqual(response.status, 200)
        self.assertEqual(response.headers["Content-Type"], "text/plain")

    def test_missing(self):
        self.assertEqual(handle(self.root, "/nope.txt").status, 404)


if __name__ == "__main__":
    unittest.main()
