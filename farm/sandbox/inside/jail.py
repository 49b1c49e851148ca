"""A PID namespace for the agent's commands, so that they cannot kill the sandbox agent.

Part of the sandbox agent (see server.py): stdlib-only and Python >= 3.8, and a script of its
own (``jail.py hold``).

Without it, an agent command such as ``kill -9 -1`` kills the sandbox agent (and the relay), the
sandbox is lost, and the model's own failure becomes an infrastructure error. With it:

* ``hold`` (started once by the agent) unshares a PID namespace and forks its init, which
  reaps orphans and, in a mount namespace of its own, mounts a ``/proc`` of the new namespace;
  the kernel ignores a SIGKILL sent to an init from inside its namespace;
* the init is also the commands' resident spawner (spawn.py): the agent sends it each command,
  it starts the command's shell there without the jail's capabilities, and reports its exit
  status. ``ps`` inside shows the namespace's own PIDs, and no PID a command can name is the
  agent's, the relay's or the holder's;
* :meth:`Jail.kill` (the agent's ``kill_leftovers``) SIGKILLs the init from outside: the kernel
  then ends every process of the namespace at once, and none of them can fork meanwhile, so a
  fork storm that filled the sandbox's pids limit cannot outrun it. The agent then makes a
  fresh jail for later commands (procs.py ``kill_jail``).

The agent cannot do this itself: a multithreaded process that unshared a PID namespace can no
longer start threads (clone(2), EINVAL), hence the two single-threaded helpers (the holder and
the init). The agent keeps its own view from outside: its process table lists the commands
under their outer PIDs, which is what its timeouts and kills use.

The capabilities it needs (``CAP_SYS_ADMIN``, ``CAP_SYS_CHROOT``, ``CAP_SETPCAP``) are granted
by the backend only for this and named in ``FARM_AGENT_JAIL``; every command loses them from
all five capability sets before it starts, so the task runs with exactly the capabilities it
would have had. Where they are missing (a Kubernetes pod under the restricted Pod Security
standard), :func:`start` says why and commands run as before; ``ping`` reports which
(``agent_isolation``).
"""

import ctypes
import os
import sys

ENV_VAR = "FARM_AGENT_JAIL"  # comma-separated capabilities granted only for the jail
SCRIPT = os.path.abspath(__file__)
CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_LOWER = 3
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
CAP_NUMBERS = {"CAP_SETPCAP": 8, "CAP_IPC_LOCK": 14, "CAP_SYS_CHROOT": 18, "CAP_SYS_ADMIN": 21}
CAP_VERSION_3 = 0x20080522


def _spawn_module():
    if __package__:
        from . import spawn
    else:  # a script (the sandbox agent's layout; main() put its directory on sys.path)
        import spawn
    return spawn


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _errno_text():
    return os.strerror(ctypes.get_errno())


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


class Jail:
    """The namespace :func:`start` made: its holder and init (outer PIDs) and what to drop."""

    def __init__(self, holder_pid, init_pid, private_proc, drop, holder=None, spawner=None):
        self.holder_pid = holder_pid
        self.init_pid = init_pid
        self.private_proc = private_proc  # the init mounted a /proc of the namespace
        self.drop = tuple(drop)
        self.holder = holder  # the holder's Popen, to wait for it once the namespace is killed
        self.spawner = spawner  # spawn.Spawner: the agent's end of the init's sockets

    def describe(self):
        return "pid-namespace" + ("+proc" if self.private_proc else "")

    def protected(self):
        return {self.holder_pid, self.init_pid}

    def own(self, pid):
        """Whether ``pid`` is one of the jail's own processes, not a command's: the holder, the
        init, or the init's standby (spawn.py). The init and its standby alone hold the jail's
        capabilities effective: every command lost them at its exec, none can regain them."""
        if pid in (self.holder_pid, self.init_pid):
            return True
        if not self.drop:
            return False
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith("CapEff:"):
                        held = int(line.split()[1], 16)
                        return all(held >> cap & 1 for cap in self.drop)
        except (OSError, ValueError, IndexError):
            pass
        return False

    def members(self):
        """Outer PIDs of every process in the namespace but the jail's own (none: an idle jail)."""
        try:
            ns = os.readlink("/proc/%d/ns/pid" % self.init_pid)
        except OSError:
            return set()
        out = set()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == self.init_pid:
                continue
            try:
                if os.readlink("/proc/%s/ns/pid" % name) == ns:
                    out.add(int(name))
            except OSError:
                pass  # gone meanwhile
        return {pid for pid in out if not self.own(pid)}

    def kill(self, timeout_s=10.0, thaw=None):  # pragma: no mutate block (the agent's own process only)
        """SIGKILL the init: the kernel then kills every process of the namespace at once, and
        no process in it can fork any more while it does (a storm that forks faster than a kill
        one by one cannot outrun it). Returns once the holder has exited (the namespace is gone
        and its pids are free again), or after ``timeout_s``."""
        import signal
        import time

        try:
            os.kill(self.init_pid, signal.SIGKILL)  # from outside: an init is not immune to that
        except OSError:
            pass
        if thaw is not None:  # the commands were frozen for the kill: they die once thawed
            thaw()
        if self.holder is not None:
            try:
                self.holder.wait(timeout_s)
            except Exception:  # subprocess.TimeoutExpired: the caller's sweep goes on regardless
                pass
            return
        deadline = time.monotonic() + timeout_s
        while os.path.exists("/proc/%d" % self.holder_pid) and time.monotonic() < deadline:
            time.sleep(0.01)


def requested():
    """The capability numbers the backend named, or None when it asked for no jail."""
    value = os.environ.pop(ENV_VAR, None)  # never inherited by a command
    if value is None:
        return None
    out = []
    for name in value.split(","):
        name = name.strip().upper()
        name = name if name.startswith("CAP_") else "CAP_" + name
        if name in CAP_NUMBERS:
            out.append(CAP_NUMBERS[name])
    return out


def start(drop=None, join_fds=(), home_fds=()):
    """Make the namespace; (Jail, "") or (None, why not).

    ``drop``: the capabilities to drop, for a jail made again after the first was killed (the
    backend's variable is read, and removed, by the first call). ``join_fds``: the commands'
    ``cgroup.procs`` descriptors (contain.py), which every command joins before its exec;
    ``home_fds``: those of the group the agent (and so the init) lives in."""
    import socket
    import subprocess

    spawn = _spawn_module()
    if drop is None:
        drop = requested()
    if drop is None:
        return None, "not requested (%s unset)" % ENV_VAR
    # requests: a stream (a command's text has no size limit a datagram would impose);
    # replies: datagrams, each whole, from the init and from each command before its exec
    requests, init_requests = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    replies, init_replies = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # the senders' PIDs as this namespace numbers them (the kernel translates them)
    replies.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    given = [init_requests.fileno(), init_replies.fileno()] + list(join_fds) + list(home_fds)
    try:
        # PID 1 of the commands' namespace: an environment of its own, nothing of the agent's
        holder = subprocess.Popen([sys.executable, "-I", "-S", SCRIPT, "hold", _numbers(drop), str(given[0]),
                                   str(given[1]), _numbers(join_fds), _numbers(home_fds)], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, close_fds=True, pass_fds=given, cwd="/",
                                  env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
    except OSError as e:
        requests.close()
        replies.close()
        return None, "the jail holder did not start: %s" % e
    finally:
        init_requests.close()
        init_replies.close()
    words = holder.stdout.readline().decode("ascii", "replace").split()
    holder.stdout.close()
    if len(words) < 3 or words[0] != "ready":
        holder.kill()
        holder.wait()
        requests.close()
        replies.close()
        return None, " ".join(words) or "the jail holder exited"
    return Jail(holder.pid, int(words[1]), words[2] == "proc", drop, holder, spawn.Spawner(requests, replies)), ""


# --- the two helper programs (each in a process of its own) -------------------------------


def drop_capabilities(libc, caps, keep_effective=False):  # pragma: no mutate block (runs between fork and exec)
    """Drop ``caps`` from the bounding and ambient sets, then from the other three.

    ``keep_effective``: keep them effective and permitted in this process (the jail's init,
    spawn.py): only what an exec passes on loses them, so every program it starts has none.
    CAP_SETPCAP leaves the bounding set last: dropping the others needs it."""
    for cap in sorted(caps, key=lambda c: c == CAP_NUMBERS["CAP_SETPCAP"]):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EPERM where it was never there: fine
        libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, cap, 0, 0)
    header = _CapHeader(CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    for cap in caps:
        word, bit = divmod(cap, 32)
        mask = ~(1 << bit) & 0xFFFFFFFF
        if not keep_effective:
            data[word].effective &= mask
            data[word].permitted &= mask
        data[word].inheritable &= mask
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _numbers(values):
    return ",".join(str(v) for v in values) or "-"


def _parse_numbers(word):
    return [int(v) for v in word.split(",") if v and v != "-"]


def hold(args):  # pragma: no mutate block (its own process)
    """Unshare a PID namespace, fork its init, print ``ready <init pid> <proc|why>``, stay.

    ``args``: the capabilities every command drops, the init's request and reply sockets, the
    commands' cgroup descriptors and the agent's own (``start``)."""
    import signal  # here, not at the top: the agent imports this module

    libc = _libc()
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the agent died: so does the namespace
    caps = _parse_numbers(args[0])
    requests_fd, replies_fd = int(args[1]), int(args[2])
    join_fds, home_fds = _parse_numbers(args[3]), _parse_numbers(args[4])
    if libc.unshare(CLONE_NEWPID) != 0:
        sys.stdout.write("failed unshare(CLONE_NEWPID): %s\n" % _errno_text())
        return 1
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _init(libc, w, caps, requests_fd, replies_fd, join_fds, home_fds)
    os.close(w)
    # the init's alone: once it is gone, the agent reads the end of its replies
    for fd in [requests_fd, replies_fd] + join_fds + home_fds:
        os.close(fd)
    status = os.read(r, 200).decode("ascii", "replace").strip() or "no-status"
    os.close(r)
    sys.stdout.write("ready %d %s\n" % (pid, status))
    sys.stdout.flush()
    os.close(1)
    os.waitpid(pid, 0)  # the init never exits while this lives; if it does, so does this
    return 1


def _init(libc, status_fd, caps, requests_fd, replies_fd, join_fds, home_fds):  # pragma: no mutate block (PID 1)
    import signal

    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    status = "proc"
    if libc.unshare(CLONE_NEWNS) != 0:
        status = "no-mount-namespace:" + _errno_text().replace(" ", "_")
    elif libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0 or \
            libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
        status = "no-private-proc:" + _errno_text().replace(" ", "_")
    for fd in [requests_fd, replies_fd] + join_fds + home_fds:
        os.set_inheritable(fd, False)  # no command keeps them past its exec
    os.write(status_fd, status.encode())
    os.close(status_fd)
    try:
        _spawn_module().serve(libc, caps, requests_fd, replies_fd, join_fds, home_fds, drop_capabilities)
    finally:
        os._exit(0)  # the agent closed its end: the namespace ends with this init


def main(args):  # pragma: no mutate block (its own process)
    sys.path.insert(0, os.path.dirname(SCRIPT))  # under -I the script's directory is not on it
    if args[:1] == ["hold"] and len(args) == 6:
        return hold(args[1:])
    sys.stderr.write("usage: jail.py hold CAPS REQUESTS_FD REPLIES_FD JOIN_FDS HOME_FDS (each a,b,... or -)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
