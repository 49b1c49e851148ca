class InvalidPage(Exception):
    """The requested page number cannot be served."""


class PageNotAnInteger(InvalidPage):
    pass


class EmptyPage(InvalidPage):
    pass
