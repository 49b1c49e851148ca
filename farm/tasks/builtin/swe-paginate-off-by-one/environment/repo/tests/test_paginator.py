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


if __name__ == "__main__":
    unittest.main()
