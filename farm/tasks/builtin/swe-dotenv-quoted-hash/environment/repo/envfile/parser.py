import re
from dataclasses import dataclass

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "$"}


class ParseError(ValueError):
    def __init__(self, lineno, message):
        super().__init__(f"line {lineno}: {message}")
        self.lineno = lineno


@dataclass(frozen=True)
class Entry:
    key: str
    value: str
    quote: str  # "", "'" or '"'
    lineno: int


def _unescape(text, lineno):
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 >= len(text):
                raise ParseError(lineno, "dangling backslash")
            nxt = text[i + 1]
            # Keep \$ escaped so that interpolation can tell it from a real ${...}.
            out.append("\\$" if nxt == "$" else _ESCAPES.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _parse_value(value, lineno):
    if " #" in value or "\t#" in value:
        value = re.split(r"\s#", value, maxsplit=1)[0].rstrip()
    if value[:1] in ("'", '"'):
        quote = value[0]
        if len(value) < 2 or value[-1] != quote:
            raise ParseError(lineno, f"unterminated {quote} quoted value")
        inner = value[1:-1]
        if quote == '"':
            inner = _unescape(inner, lineno)
        return inner, quote
    return value, ""


def parse_lines(text):
    """The entries of a .env file, in file order."""
    entries = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key):
            raise ParseError(lineno, f"expected KEY=VALUE, got {raw.strip()!r}")
        value, quote = _parse_value(value.strip(), lineno)
        entries.append(Entry(key, value, quote, lineno))
    return entries
