import hashlib
import os
import tempfile
import unittest

from snapkit import BackupError, checksum, list_archive, make_archive


class SnapkitTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        for name in ("a.txt", "b.txt"):
            with open(os.path.join(self.dir, name), "w") as fh:
                fh.write(name * 3)

    def tearDown(self):
        self.tmp.cleanup()

    def test_checksum(self):
        expected = hashlib.sha256(b"a.txta.txta.txt").hexdigest()
        self.assertEqual(checksum(os.path.join(self.dir, "a.txt")), expected)

    def test_archive_round_trip(self):
        dest = os.path.join(self.dir, "out.tar.gz")
        make_archive(dest, ["a.txt", "b.txt"], cwd=self.dir)
        self.assertEqual(sorted(list_archive(dest)), ["a.txt", "b.txt"])

    def test_missing_file(self):
        with self.assertRaises(BackupError):
            checksum(os.path.join(self.dir, "missing.txt"))


if __name__ == "__main__":
    unittest.main()
