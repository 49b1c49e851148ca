"""Process checks the sandbox tests share (a test only ever asks about pids it started)."""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is neither a zombie nor dead (state from /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # the state letter follows the command name, which may itself contain spaces and ')'
    return stat[stat.rindex(")") + 2] not in "ZX"


def parent(pid: int) -> int:
    """The parent pid of ``pid`` (field 4 of /proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def descends_from_this_test(pid: int) -> bool:
    """True when ``pid`` runs under this process: something the test started, not anyone else's."""
    while pid > 1:
        if pid == os.getpid():
            return True
        pid = parent(pid)
    return False
