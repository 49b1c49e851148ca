"""Output capture of the sandbox agent's commands: the first and last bytes of each stream.

Part of the sandbox agent (see server.py): stdlib-only and Python >= 3.8; procs.py runs the
commands and re-exports these names.
"""

import os
import time

READ_SIZE = 1 << 16


class Capture:
    """Keeps the first and last cap/2 bytes of a stream and counts the rest."""

    def __init__(self, cap):
        self.cap = max(0, int(cap))
        self.head_cap = self.cap // 2
        self.tail_cap = self.cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data):
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_cap:
            self.tail += data
            if len(self.tail) > self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    @property
    def truncated(self):
        return self.total > self.cap

    def text(self):
        if not self.truncated:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", "replace")
        dropped = self.total - len(self.head) - len(self.tail)
        head = bytes(self.head).decode("utf-8", "replace")
        tail = bytes(self.tail).decode("utf-8", "replace")
        sep = "" if head.endswith("\n") or not head else "\n"
        return "%s%s[... %d bytes truncated ...]\n%s" % (head, sep, dropped, tail)


def _drain(sel):
    """Take what killed processes left in the pipes, without waiting for a straggler that may
    still hold them open."""
    for key in list(sel.get_map().values()):
        os.set_blocking(key.fd, False)
        try:
            while True:
                data = os.read(key.fd, READ_SIZE)
                if not data:
                    break
                key.data.feed(data)
        except (BlockingIOError, OSError):
            pass


def fork_failed(e, started):
    """The exec result of a command that could not be started for want of a process."""
    msg = "farm: cannot start the command: %s (the sandbox's process limit is reached)\n" % (e.strerror or e)
    return {"exit_code": 126, "stdout": "", "stderr": msg, "timed_out": False,
            "duration_s": round(time.monotonic() - started, 6), "truncated": False, "output_bytes": len(msg)}
