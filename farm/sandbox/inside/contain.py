"""The commands' own cgroup, as the sandbox agent sees it: descriptors, never a path.

Part of the sandbox agent (see server.py): stdlib-only and Python >= 3.8.

Where the backend can (local: farm/sandbox/local/cgroups.py), the agent's commands run in a
cgroup below the sandbox's, with its pids and memory limits less a reserve for the agent, so
that a fork bomb or a memory blow-up meets its limits there and the agent can still answer and
start the next command (issue 40). The backend opens the group's files and passes the
descriptors down; the agent needs no view of /sys/fs/cgroup, and no command inherits them:

* ``FARM_COMMAND_CGROUPS``: write-only ``cgroup.procs`` descriptors, one per controller. Every
  process the agent spawns writes ``0`` (itself) to each between fork and exec (``joining``);
* ``FARM_AGENT_CGROUPS``: the same for the group the agent itself lives in, controller by
  controller as above: the jail's init moves itself into the commands' group to start a
  command there by ``posix_spawn``, and back (spawn.py);
* ``FARM_COMMAND_FREEZER``: the group's ``freezer.state``: ``freeze`` stops every command at
  once, so that ending a fork bomb does not race thousands of forks (procs.py ``end_command``);
* and the agent pins its own pages (``pin_memory``) with ``CAP_IPC_LOCK``, granted to it alone
  (the jail drops it from every command, as the jail's own capabilities).
"""

import ctypes
import os

CGROUP_ENV = "FARM_COMMAND_CGROUPS"
HOME_ENV = "FARM_AGENT_CGROUPS"
FREEZER_ENV = "FARM_COMMAND_FREEZER"
MCL_CURRENT = 1


def _fds(name):
    """The descriptors named in the environment variable ``name`` (removed from the environment,
    kept from every child's exec); () when there are none."""
    fds = []
    for word in os.environ.pop(name, "").split(","):
        try:
            fd = int(word)
            os.set_inheritable(fd, False)
        except (ValueError, OSError):
            continue  # not a descriptor of ours: that group is not joined, the others are
        fds.append(fd)
    return tuple(fds)


class Containment:
    """The descriptors of the commands' cgroup (``fds``), of the agent's own (``home_fds``, in
    the same order) and the commands' freezer, if the backend gave any."""

    def __init__(self, fds=(), freezer=None, home_fds=()):
        self.fds = tuple(fds)
        self.freezer = freezer
        self.home_fds = tuple(home_fds)

    @classmethod
    def from_environment(cls):
        freezer = _fds(FREEZER_ENV)
        return cls(_fds(CGROUP_ENV), freezer[0] if freezer else None, _fds(HOME_ENV))

    def joining(self, then):
        """A preexec function that joins the commands' group, then runs ``then`` (or ``then``
        itself where there is no group)."""
        if not self.fds:
            return then
        fds = self.fds

        def preexec():  # pragma: no mutate block (runs between fork and exec)
            for fd in fds:
                try:
                    os.write(fd, b"0")  # "0": the writer itself, and all it will start
                except OSError:
                    pass  # the group is gone (the sandbox is closing): run where we are
            if then is not None:
                then()
        return preexec

    def freeze(self, frozen):
        """Freeze (or thaw) every process of the commands at once; False where there is no
        freezer. A frozen process takes a SIGKILL only once thawed."""
        if self.freezer is None:
            return False
        try:
            os.write(self.freezer, b"FROZEN" if frozen else b"THAWED")
        except OSError:
            return False
        return True


def pin_memory():  # pragma: no mutate block (the agent's own process only)
    """Lock the agent's pages in memory (``mlockall(MCL_CURRENT)``; needs ``CAP_IPC_LOCK`` or a
    large RLIMIT_MEMLOCK, else False). Why: the commands' memory limit reclaims the page cache
    they share with the agent (python3, libc); thousands of shells thrashing at it evicted the
    agent's own code and stalled it for tens of seconds past a command's timeout."""
    try:
        return ctypes.CDLL(None, use_errno=True).mlockall(MCL_CURRENT) == 0
    except (OSError, AttributeError):
        return False
