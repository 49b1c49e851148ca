import unittest

from pagekit import EmptyPage, PageNotAnInteger, Paginator


class PaginatorTest(unittest.TestCase):
    def test_uneven_count(self):
        p = Paginator(range(11), per_page=5)
        self.assertEqual(p.num_pages, 3)
        self.assertEqual(list(p.page(3)), [10])

    def test_first_page(self):
        page = Paginator("abcdefg", per_page=3).page(1)
        self.assertEqual(list(page), ["a", "b", "c"])
        self.assertTrue(page.has_next())
        self.assertFalse(page.has_previous())

    def test_orphans_fold_into_previous_page(self):
        p = Paginator(range(11), per_page=5, orphans=2)
        self.assertEqual(p.num_pages, 2)
        self.assertEqual(list(p.page(2)), [5, 6, 7, 8, 9, 10])

    def test_invalid_numbers(self):
        p = Paginator(range(11), per_page=5)
        with self.assertRaises(PageNotAnInteger):
            p.page("x")
        with self.assertRaises(EmptyPage):
            p.page(0)
        with self.assertRaises(EmptyPage):
            p.page(4)

    def test_empty_first_page_allowed(self):
        p = Paginator([], per_page=4)
        self.assertEqual(p.num_pages, 1)
        self.assertEqual(list(p.page(1)), [])
        self.assertEqual(p.page(1).start_index(), 0)

    def test_empty_first_page_disallowed(self):
        p = Paginator([], per_page=4, allow_empty_first_page=False)
        self.assertEqual(p.num_pages, 0)
        with self.assertRaises(EmptyPage):
            p.page(2)

    def test_indexes_on_partial_page(self):
        page = Paginator(range(23), per_page=10).page(3)
        self.assertEqual((page.start_index(), page.end_index()), (21, 23))

    # --- exact multiples ---

    def test_exact_multiple_page_count(self):
        self.assertEqual(Paginator(range(10), per_page=5).num_pages, 2)
        self.assertEqual(Paginator(range(100), per_page=25).num_pages, 4)

    def test_exact_multiple_has_no_trailing_page(self):
        p = Paginator(range(10), per_page=5)
        with self.assertRaises(EmptyPage):
            p.page(3)
        self.assertFalse(p.page(2).has_next())
        self.assertEqual(list(p.page_range), [1, 2])

    def test_exact_multiple_last_page_indexes(self):
        page = Paginator(range(30), per_page=10).page(3)
        self.assertEqual((page.start_index(), page.end_index()), (21, 30))
        self.assertEqual(list(page), list(range(20, 30)))
        self.assertFalse(page.has_next())

    def test_orphans_when_remainder_equals_orphans(self):
        p = Paginator(range(11), per_page=5, orphans=1)
        self.assertEqual(p.num_pages, 2)
        self.assertEqual(list(p.page(2)), [5, 6, 7, 8, 9, 10])

    def test_single_item_per_page(self):
        p = Paginator("abc", per_page=1)
        self.assertEqual(p.num_pages, 3)
        self.assertEqual(Paginator([], per_page=1).num_pages, 1)


if __name__ == "__main__":
    unittest.main()
