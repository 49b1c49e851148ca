"""The process table as /proc shows it, for the sandbox agent (procs.py) and the relay (relay.py).

Part of the sandbox agent (see server.py): stdlib-only and Python >= 3.8, shipped as a file
next to server.py. Reads only: nothing here signals or starts a process.
"""

import os

TAG_VAR = "FARM_EXEC_ID"  # the environment tag every process of one command inherits


def proc_pids():
    for name in os.listdir("/proc"):
        if name.isdigit():
            yield int(name)


def stat_fields(pid):
    """(state, ppid, process group, session) of a process, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        # the comm field may contain spaces and parentheses: the fields follow the last ')'
        fields = data[data.rindex(b")") + 2:].split()
        return fields[0].decode("ascii", "replace"), int(fields[1]), int(fields[2]), int(fields[3])
    except (IndexError, ValueError):
        return None


def is_zombie(pid):
    fields = stat_fields(pid)
    return fields is None or fields[0] in ("Z", "X")


def parent_pid(pid):
    fields = stat_fields(pid)
    return -1 if fields is None else fields[1]


def environ_tags(pid):
    """The FARM_EXEC_ID values in a process's initial environment (empty for zombies)."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            data = f.read()
    except OSError:
        return ()
    prefix = TAG_VAR.encode() + b"="
    return tuple(e[len(prefix):].decode("ascii", "replace") for e in data.split(b"\0") if e.startswith(prefix))


def process_table(zombies=False):
    """pid -> (state, ppid, pgrp, session) of every live process (and of zombies with ``zombies``)."""
    table = {}
    for pid in proc_pids():
        fields = stat_fields(pid)
        if fields is not None and (zombies or fields[0] not in ("Z", "X")):
            table[pid] = fields
    return table


def descendants(root, table):
    children = {}
    for pid, fields in table.items():
        children.setdefault(fields[1], []).append(pid)
    out, todo = set(), list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, ()))
    return out
