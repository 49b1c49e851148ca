"""SIGTERM stops a run the way Ctrl-C does: every trial unwinds and closes its sandboxes first.

By default SIGTERM (``ray job stop``, a CI timeout, ``kill``) ends Python at once: no ``finally``
runs, so a container the run started (``podman run -d``, nobody's child) kept running, and a
local sandbox's directory stayed behind. Cancelling the run's task instead unwinds every trial,
and each closes the sandboxes it opened on its way out (farm/run/trial.py; under Ray the driver
waits for the cancelled trials in their actors: farm/run/workers.py ``RayExecutor.close``).
``farm run`` then exits with 143 (farm/cli.py).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable


def stop_on_sigterm(terminated: list[bool], say: Callable[[str], None]) -> None:
    """From now on SIGTERM cancels the calling task (the run) and appends to ``terminated``.

    A second SIGTERM while the sandboxes close is answered with a line, not a second
    cancellation that would cut their cleanup short. Call it from the running loop's task.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None

    def on_term() -> None:
        if terminated:
            say("SIGTERM again: still stopping this run's sandboxes")
            return
        terminated.append(True)
        say("SIGTERM: stopping this run's sandboxes, then exiting")
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_term)
    except (NotImplementedError, RuntimeError):  # not the main thread (a test calling main() from one)
        pass
