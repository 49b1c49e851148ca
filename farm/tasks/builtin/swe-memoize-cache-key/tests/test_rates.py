import unittest

from fxcache import PROVIDER, MISSING, TTLStore, convert, fee, memoize, reset


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class ConvertTest(unittest.TestCase):
    def setUp(self):
        reset()

    def test_convert(self):
        self.assertEqual(convert(100, "EUR"), 108.37)

    def test_second_call_is_cached(self):
        convert(100, "GBP")
        convert(100, "GBP")
        self.assertEqual(PROVIDER.lookups, 1)

    def test_different_amounts_are_different_entries(self):
        self.assertEqual(convert(1, "CHF"), 1.13)
        self.assertEqual(convert(2, "CHF"), 2.26)

    def test_unknown_currency(self):
        with self.assertRaisesRegex(ValueError, "XYZ"):
            convert(1, "XYZ")

    def test_fee_minimum(self):
        self.assertEqual(fee(10, "USD"), 0.5)

    def test_keyword_arguments_are_part_of_the_key(self):
        self.assertEqual(convert(100, "EUR"), 108.37)
        self.assertEqual(convert(100, "EUR", places=0), 108.0)
        self.assertEqual(convert(100, "EUR", quote="GBP"), 85.51)
        self.assertEqual(convert(100, "EUR", quote="USD"), 108.37)

    def test_fee_and_convert_do_not_collide(self):
        self.assertEqual(convert(1000, "EUR"), 1083.7)
        self.assertEqual(fee(1000, "EUR"), 10.84)
        reset()
        self.assertEqual(fee(500, "GBP"), 6.34)
        self.assertEqual(convert(500, "GBP"), 633.7)

    def test_cached_keyword_call(self):
        convert(100, "JPY", quote="EUR")
        convert(100, "JPY", quote="EUR")
        self.assertEqual(PROVIDER.lookups, 1)


class StoreTest(unittest.TestCase):
    def test_entries_expire(self):
        clock = FakeClock()
        store = TTLStore(ttl_s=10, clock=clock)
        store.set("k", 1)
        self.assertEqual(store.get("k"), 1)
        clock.now += 10
        self.assertIs(store.get("k"), MISSING)
        self.assertEqual((store.hits, store.misses), (1, 1))

    def test_memoized_function_recomputes_after_expiry(self):
        clock = FakeClock()
        calls = []

        @memoize(TTLStore(ttl_s=5, clock=clock))
        def square(x):
            calls.append(x)
            return x * x

        square(3), square(3)
        clock.now += 6
        square(3)
        self.assertEqual(calls, [3, 3])

    def test_functions_sharing_a_store(self):
        store = TTLStore()

        @memoize(store)
        def double(x):
            return 2 * x

        @memoize(store)
        def triple(x):
            return 3 * x

        self.assertEqual((double(4), triple(4), double(4), triple(4)), (8, 12, 8, 12))

    def test_kwargs_order_does_not_matter(self):
        calls = []

        @memoize(TTLStore())
        def area(*, w, h):
            calls.append((w, h))
            return w * h

        self.assertEqual(area(w=2, h=3), 6)
        self.assertEqual(area(h=3, w=2), 6)
        self.assertEqual(area(w=3, h=2), 6)
        self.assertEqual(area(w=2, h=5), 10)
        self.assertEqual(calls, [(2, 3), (3, 2), (2, 5)])


if __name__ == "__main__":
    unittest.main()
