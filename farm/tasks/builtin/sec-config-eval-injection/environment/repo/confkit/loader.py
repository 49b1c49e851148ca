import os
import re

from .values import parse_value

_SECTION = re.compile(r"^\[([A-Za-z0-9_]+)\]$")


def _strip_comment(line):
    # A '#' inside a quoted value is not a comment.
    quote = None
    for i, ch in enumerate(line):
        if ch in "\"'" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None:
            return line[:i]
    return line


def loads(text, environ=None):
    """Parse settings text into ``{section: {key: value}}``, then apply env overrides."""
    environ = os.environ if environ is None else environ
    settings, section = {}, None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw).strip()
        if not line:
            continue
        match = _SECTION.match(line)
        if match:
            section = settings.setdefault(match.group(1), {})
            continue
        key, sep, value = line.partition("=")
        if not sep or section is None:
            raise ValueError(f"line {lineno}: expected 'key = value' inside a [section]: {raw!r}")
        section[key.strip()] = parse_value(value)
    for name, value in environ.items():
        if not name.startswith("CONFKIT_"):
            continue
        _, section_name, key = name.split("_", 2) if name.count("_") >= 2 else (None, None, None)
        if section_name and section_name.lower() in settings:
            settings[section_name.lower()][key.lower()] = parse_value(value)
    return settings


def load(path, environ=None):
    with open(path, encoding="utf-8") as fh:
        return loads(fh.read(), environ)
