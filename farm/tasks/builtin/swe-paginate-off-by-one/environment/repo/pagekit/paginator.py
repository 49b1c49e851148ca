from .errors import EmptyPage, PageNotAnInteger
from .page import Page


class Paginator:
    def __init__(self, object_list, per_page, orphans=0, allow_empty_first_page=True):
        per_page = int(per_page)
        if per_page < 1:
            raise ValueError(f"per_page must be at least 1, got {per_page}")
        if orphans < 0:
            raise ValueError(f"orphans must not be negative, got {orphans}")
        self.object_list = list(object_list)
        self.per_page = per_page
        self.orphans = int(orphans)
        self.allow_empty_first_page = allow_empty_first_page

    @property
    def count(self):
        return len(self.object_list)

    @property
    def num_pages(self):
        if self.count == 0 and not self.allow_empty_first_page:
            return 0
        # Items that would end up alone on a short last page ("orphans") are folded into
        # the page before it.
        hits = max(1, self.count - self.orphans)
        return hits // self.per_page + 1

    @property
    def page_range(self):
        return range(1, self.num_pages + 1)

    def validate_number(self, number):
        if isinstance(number, float) and not number.is_integer():
            raise PageNotAnInteger(f"page number {number!r} is not an integer")
        try:
            number = int(number)
        except (TypeError, ValueError):
            raise PageNotAnInteger(f"page number {number!r} is not an integer") from None
        if number < 1:
            raise EmptyPage(f"page number {number} is less than 1")
        if number > self.num_pages:
            if number == 1 and self.allow_empty_first_page:
                return number
            raise EmptyPage(f"page {number} contains no results")
        return number

    def page(self, number):
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        top = bottom + self.per_page
        if top + self.orphans >= self.count:
            top = self.count
        return Page(self.object_list[bottom:top], number, self)
