"""How often a sandbox may re-open its exec stream, and the error when it may not any more.

A lifetime count (the first version: 3 per sandbox) ends a long trial on a cluster that cuts
idle exec streams every few minutes (kubernetes/kubernetes#128314) although every cut was
survived. What marks a sandbox as lost is a burst of losses, so the budget is a rate: at most
``limit`` re-opens in any ``window_s`` seconds (a sliding window over the times of the
re-opens). ``window_s=None`` keeps the lifetime count (the docker/podman backend, where a
stream is a local process and a loss is rare and telling).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

from farm.sandbox.base import SandboxLostError


class ReconnectBudgetError(SandboxLostError):
    """The exec stream was lost more often than the budget allows: the sandbox is lost.

    ``reason`` names it for the run layer; the trial row's class is ``sandbox_lost``."""

    reason = "reconnect_budget"


class ReconnectBudget:
    """At most ``limit`` re-opens in any ``window_s`` seconds (``None``: in the whole life)."""

    def __init__(self, limit: int, window_s: float | None, *, setting: str = "max_reconnects",
                 clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 0:
            raise ValueError(f"{setting}: must be >= 0, got {limit!r}")
        if window_s is not None and window_s <= 0:
            raise ValueError(f"reconnect window: must be > 0, got {window_s!r}")
        self.limit = limit
        self.window_s = window_s
        self.setting = setting
        self._clock = clock
        self._times: collections.deque[float] = collections.deque()
        self.used = 0  # every re-open, for the row (not only those in the window)

    def _expire(self, now: float) -> None:
        if self.window_s is None:
            return
        while self._times and now - self._times[0] >= self.window_s:
            self._times.popleft()

    def take(self) -> bool:
        """Spend one re-open if the budget has one; False when it is exhausted."""
        now = self._clock()
        self._expire(now)
        if len(self._times) >= self.limit:
            return False
        self._times.append(now)
        self.used += 1
        return True

    def give_back(self) -> None:
        """The last re-open was not the transport's fault (the agent's own command killed it)."""
        if self._times:
            self._times.pop()
            self.used -= 1

    def describe(self) -> str:
        per = f"in {self.window_s:g} s" if self.window_s is not None else "in the sandbox's life"
        return f"{self.setting}={self.limit} re-opens {per}"
