"""The relay's stream framing, in-process (farm/sandbox/inside/relay.py): both directions forward
whole lines only, so a stream cut mid-line never splices two requests or shows half a response."""

from __future__ import annotations

import pytest

from farm.sandbox.inside import relay


@pytest.mark.parametrize(("buffered", "lines", "rest"), [
    (b"", b"", b""),
    (b'{"id":"a"', b"", b'{"id":"a"'),
    (b'{"id":"a"}\n', b'{"id":"a"}\n', b""),
    (b'{"id":"a"}\n{"id":"b"}\n{"id":', b'{"id":"a"}\n{"id":"b"}\n', b'{"id":'),
    (b"\n", b"\n", b""),
])
def test_whole_lines_keeps_a_partial_line_for_the_next_read(buffered: bytes, lines: bytes, rest: bytes) -> None:
    assert relay.whole_lines(buffered) == (lines, rest)


def test_a_line_split_over_reads_is_forwarded_once_and_whole() -> None:
    pending, out = b"", []
    for piece in (b'{"id":"a","op":"ex', b'ec"}\n{"id":"b",', b'"op":"read"}\n'):
        chunk, pending = relay.whole_lines(pending + piece)
        if chunk:
            out.append(chunk)
    assert out == [b'{"id":"a","op":"exec"}\n', b'{"id":"b","op":"read"}\n'] and pending == b""
