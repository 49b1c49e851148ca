"""Process checks the sandbox tests share (a test only ever asks about pids it started)."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is neither a zombie nor dead (state from /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # the state letter follows the command name, which may itself contain spaces and ')'
    return stat[stat.rindex(")") + 2] not in "ZX"
