from .loader import load, loads
from .parser import Entry, ParseError, parse_lines

__all__ = ["Entry", "ParseError", "load", "loads", "parse_lines"]
