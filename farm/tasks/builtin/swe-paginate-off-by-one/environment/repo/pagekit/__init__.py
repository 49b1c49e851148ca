"""Split a sequence into numbered pages."""

from .errors import EmptyPage, InvalidPage, PageNotAnInteger
from .page import Page
from .paginator import Paginator

__all__ = ["EmptyPage", "InvalidPage", "Page", "PageNotAnInteger", "Paginator"]
__version__ = "0.3.0"
