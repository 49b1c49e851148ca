import os

from .interpolate import expand
from .parser import parse_lines


def loads(text, environ=None):
    """Parse .env text into a dict; ``environ`` (default os.environ) feeds ${VAR} expansion."""
    environ = os.environ if environ is None else environ
    values = {}
    for entry in parse_lines(text):
        if entry.quote == "'":
            values[entry.key] = entry.value
        else:
            values[entry.key] = expand(entry.value, values, environ)
    return values


def load(path, environ=None, override=False):
    """Read ``path`` and copy its values into ``environ``; returns what was read."""
    environ = os.environ if environ is None else environ
    with open(path, encoding="utf-8") as fh:
        values = loads(fh.read(), environ)
    for key, value in values.items():
        if override or key not in environ:
            environ[key] = value
    return values
