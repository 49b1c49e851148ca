"""Retries of store I/O: throttling (503 SlowDown), 5xx, timeouts and dropped connections.

An object store under load answers some requests with 503 SlowDown or a 500, drops
connections and stalls; a run of hours meets all of them. Each store operation is retried
with exponential backoff and full jitter (so that many writers do not retry in step) until
``budget_s`` has passed since its first try, then :class:`farm.errors.StoreWriteError` stops
the run with one line naming the bucket and the last error.

Retrying is safe because every operation is idempotent: a write puts the same bytes under the
same key on every try (the caller fixes the key before the first), and an object PUT is
all-or-nothing, so a reader sees the old state or the whole new object, never a part of it.
A client error (403, 404, a bad request) is not retried: waiting does not fix it.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from typing import TypeVar

from farm.errors import StoreError, StoreWriteError

T = TypeVar("T")

BASE_S = 0.1  # first backoff; doubles per try up to CAP_S
CAP_S = 5.0

# What AWS SDKs (pyarrow's C++ one, botocore) put in the messages of transient failures.
_TRANSIENT = re.compile(
    r"slow ?down|slow_down|throttl|503|500|502|504|service.?unavailable|internal.?(error|failure)|"
    r"timeout|timed out|reset|broken pipe|connection|network|curl|unexpected eof|incomplete|request_time",
    re.IGNORECASE,
)


def transient(exc: BaseException) -> bool:
    """True for a failure that may pass by waiting (throttling, 5xx, timeout, reset)."""
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError):
        return False
    return isinstance(exc, OSError) and bool(_TRANSIENT.search(str(exc)))


def one_line(exc: BaseException) -> str:
    """The error as one line (SDK messages span several), at most 300 characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def with_retries(fn: Callable[[], T], *, budget_s: float, where: str, what: str,
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()``, retried on transient errors for up to ``budget_s`` seconds.

    Raises:
        StoreWriteError: still failing when the budget ran out (names ``where`` and the error).
        StoreError: a non-transient failure (names ``what`` and the error).
    """
    t0 = time.monotonic()
    tries = 0
    while True:
        tries += 1
        try:
            return fn()
        except OSError as exc:
            if not transient(exc):
                raise StoreError(f"cannot {what}: {one_line(exc)}") from None
            waited = time.monotonic() - t0
            # full jitter: a random wait up to the exponential step, never past the budget
            step = min(CAP_S, BASE_S * 2 ** (tries - 1))
            delay = random.uniform(0, step)
            if waited + delay > budget_s:
                raise StoreWriteError(
                    f"store {where}: still failing after {tries} tries in {waited:.1f}s "
                    f"(store.retry_budget_s={budget_s:g}); last error on {what}: {one_line(exc)}"
                ) from None
            sleep(delay)
