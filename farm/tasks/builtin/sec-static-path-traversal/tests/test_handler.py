import os
import tempfile
import unittest

from staticsrv import handle

SECRET = b"root:x:0:0:TOP-SECRET"


class HandlerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = os.path.join(self.tmp.name, "site")
        os.makedirs(os.path.join(self.root, "docs"))
        self.write("site/index.html", b"<h1>home</h1>")
        self.write("site/docs/guide.txt", b"read me")
        self.write("site/docs/index.html", b"docs home")
        self.write("site/release notes.txt", b"spaces")
        self.write("site/v1..v2.diff", b"double dots in a name")
        self.write("secret.txt", SECRET)
        self.write("site-private/key.pem", SECRET)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, rel, data):
        path = os.path.join(self.tmp.name, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)

    def assertBlocked(self, request_path):
        response = handle(self.root, request_path)
        self.assertIn(response.status, (400, 403, 404), f"{request_path!r} was served")
        self.assertNotIn(b"SECRET", response.body)

    # functionality

    def test_index(self):
        response = handle(self.root, "/")
        self.assertEqual((response.status, response.body), (200, b"<h1>home</h1>"))

    def test_nested_file(self):
        response = handle(self.root, "/docs/guide.txt")
        self.assertEqual(response.status, 200)
        self.assertEqual(response.headers["Content-Type"], "text/plain")

    def test_directory_index(self):
        self.assertEqual(handle(self.root, "/docs/").body, b"docs home")
        self.assertEqual(handle(self.root, "/docs").body, b"docs home")

    def test_missing(self):
        self.assertEqual(handle(self.root, "/nope.txt").status, 404)

    def test_percent_encoded_name_and_query(self):
        response = handle(self.root, "/release%20notes.txt?download=1")
        self.assertEqual((response.status, response.body), (200, b"spaces"))

    def test_double_dots_inside_a_name(self):
        self.assertEqual(handle(self.root, "/v1..v2.diff").body, b"double dots in a name")

    def test_dot_segments_that_stay_inside(self):
        self.assertEqual(handle(self.root, "/docs/../index.html").body, b"<h1>home</h1>")

    def test_head_and_method(self):
        self.assertEqual(handle(self.root, "/", "HEAD").body, b"")
        self.assertEqual(handle(self.root, "/", "POST").status, 405)

    def test_relative_root(self):
        cwd = os.getcwd()
        os.chdir(self.tmp.name)
        try:
            self.assertEqual(handle("site", "/docs/guide.txt").body, b"read me")
            response = handle("site", "/../secret.txt")
            self.assertIn(response.status, (400, 403, 404))
        finally:
            os.chdir(cwd)

    # proof of concept: reading files outside the site root

    def test_poc_dot_dot(self):
        self.assertBlocked("/../secret.txt")
        self.assertBlocked("/docs/../../secret.txt")

    def test_poc_encoded_dot_dot(self):
        self.assertBlocked("/%2e%2e/secret.txt")
        self.assertBlocked("/docs/..%2f..%2fsecret.txt")

    def test_poc_absolute_path(self):
        self.assertBlocked("/" + os.path.join(self.tmp.name, "secret.txt"))
        self.assertBlocked("/%2f" + os.path.join(self.tmp.name, "secret.txt").lstrip("/"))

    def test_poc_sibling_prefix(self):
        self.assertBlocked("/../site-private/key.pem")

    def test_poc_symlink_out_of_root(self):
        os.symlink(os.path.join(self.tmp.name, "secret.txt"), os.path.join(self.root, "link.txt"))
        self.assertBlocked("/link.txt")


if __name__ == "__main__":
    unittest.main()
