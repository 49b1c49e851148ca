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
            self.touch(name, (name * 3).encode())

    def tearDown(self):
        self.tmp.cleanup()

    def touch(self, name, data=b"x"):
        with open(os.path.join(self.dir, name), "wb") as fh:
            fh.write(data)

    def members(self, dest):
        return sorted(name.removeprefix("./") for name in list_archive(dest))

    def assertNotPwned(self):
        self.assertFalse(os.path.exists(os.path.join(self.dir, "PWNED")), "injected command ran")

    # functionality

    def test_checksum(self):
        expected = hashlib.sha256(b"a.txta.txta.txt").hexdigest()
        self.assertEqual(checksum(os.path.join(self.dir, "a.txt")), expected)

    def test_archive_round_trip(self):
        dest = os.path.join(self.dir, "out.tar.gz")
        make_archive(dest, ["a.txt", "b.txt"], cwd=self.dir)
        self.assertEqual(self.members(dest), ["a.txt", "b.txt"])

    def test_missing_file(self):
        with self.assertRaises(BackupError):
            checksum(os.path.join(self.dir, "missing.txt"))
        with self.assertRaises(BackupError):
            make_archive(os.path.join(self.dir, "o.tgz"), ["missing.txt"], cwd=self.dir)

    def test_nothing_to_archive(self):
        with self.assertRaises(BackupError):
            make_archive(os.path.join(self.dir, "o.tgz"), [], cwd=self.dir)

    def test_names_with_spaces_and_quotes(self):
        self.touch("Q3 report.txt", b"q3")
        self.touch("it's.txt", b"quote")
        self.assertEqual(checksum(os.path.join(self.dir, "Q3 report.txt")), hashlib.sha256(b"q3").hexdigest())
        dest = os.path.join(self.dir, "my backup.tar.gz")
        make_archive(dest, ["Q3 report.txt", "it's.txt"], cwd=self.dir)
        self.assertEqual(self.members(dest), ["Q3 report.txt", "it's.txt"])

    # proof of concept: attacker-chosen file names run commands

    def test_poc_checksum_command_separator(self):
        with self.assertRaises(BackupError):
            checksum(os.path.join(self.dir, "a.txt") + "; touch " + os.path.join(self.dir, "PWNED"))
        self.assertNotPwned()

    def test_poc_archive_command_substitution(self):
        name = "$(touch PWNED)"
        self.touch(name)
        dest = os.path.join(self.dir, "out.tar.gz")
        make_archive(dest, ["a.txt", name], cwd=self.dir)
        self.assertNotPwned()
        self.assertEqual(self.members(dest), sorted(["a.txt", name]))

    def test_poc_archive_option_injection(self):
        names = ["--checkpoint=1", "--checkpoint-action=exec=touch PWNED"]
        for name in names:
            self.touch(name)
        dest = os.path.join(self.dir, "out.tar.gz")
        make_archive(dest, ["a.txt"] + names, cwd=self.dir)
        self.assertNotPwned()
        self.assertEqual(self.members(dest), sorted(["a.txt"] + names))

    def test_poc_dest_injection(self):
        dest = os.path.join(self.dir, "x.tgz; touch PWNED")
        make_archive(dest, ["a.txt"], cwd=self.dir)
        self.assertNotPwned()
        self.assertEqual(self.members(dest), ["a.txt"])


if __name__ == "__main__":
    unittest.main()
