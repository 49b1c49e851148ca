from .loader import load, loads
from .values import parse_value

__all__ = ["load", "loads", "parse_value"]
