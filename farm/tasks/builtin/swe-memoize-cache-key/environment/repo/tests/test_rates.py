import unittest

from fxcache import PROVIDER, convert, reset


class ConvertTest(unittest.TestCase):
    def setUp(self):
        reset()

    def test_convert(self):
        self.assertEqual(convert(100, "EUR"), 108.37)

    def test_second_call_is_cached(self):
        convert(100, "GBP")
        convert(100, "GBP")
        self.assertEqual(PROVIDER.lookups, 1)


if __name__ == "__main__":
    unittest.main()
