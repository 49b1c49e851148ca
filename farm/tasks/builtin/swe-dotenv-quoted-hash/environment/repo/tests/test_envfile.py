import unittest

from envfile import ParseError, loads


class LoadsTest(unittest.TestCase):
    def test_basic(self):
        self.assertEqual(loads("A=1\nexport B = two\n# comment\n", {}), {"A": "1", "B": "two"})

    def test_inline_comment(self):
        self.assertEqual(loads("A=1 # one\n", {}), {"A": "1"})

    def test_quotes(self):
        self.assertEqual(loads("A='x y'\nB=\"a\\tb\"\n", {}), {"A": "x y", "B": "a\tb"})

    def test_bad_key(self):
        with self.assertRaises(ParseError):
            loads("1A=x\n", {})


if __name__ == "__main__":
    unittest.main()
