#!/bin/bash
# Reference fix: find the closing quote first; only text after it may be a comment.
set -euo pipefail
python3 - <<'PY'
from pathlib import Path
path = Path("envfile/parser.py")
text = path.read_text()
start = text.index("def _parse_value(value, lineno):")
end = text.index("def parse_lines(text):")
new = '''def _closing_quote(value, quote):
    """Index of the quote that closes ``value[0]``, or -1."""
    i = 1
    while i < len(value):
        if quote == '"' and value[i] == "\\\\":
            i += 2
            continue
        if value[i] == quote:
            return i
        i += 1
    return -1


def _parse_value(value, lineno):
    if value[:1] in ("'", '"'):
        quote = value[0]
        close = _closing_quote(value, quote)
        if close < 0:
            raise ParseError(lineno, f"unterminated {quote} quoted value")
        rest = value[close + 1:].strip()
        if rest and not rest.startswith("#"):
            raise ParseError(lineno, f"unexpected text after the closing quote: {rest!r}")
        inner = value[1:close]
        if quote == '"':
            inner = _unescape(inner, lineno)
        return inner, quote
    if " #" in value or "\\t#" in value:
        value = re.split(r"\\s#", value, maxsplit=1)[0].rstrip()
    return value, ""


'''
path.write_text(text[:start] + new + text[end:])
PY
