"""A PID namespace for the agent's commands, so that they cannot kill the sandbox agent.

Part of the sandbox agent (see server.py): stdlib-only and Python >= 3.8, and a script of its
own (``jail.py hold`` / ``jail.py exec``).

Without it, an agent command such as ``kill -9 -1`` kills the sandbox agent (and the relay), the
sandbox is lost, and the model's own failure becomes an infrastructure error. With it:

* ``hold`` (started once by the agent) unshares a PID namespace and forks its init, which
  reaps orphans and, in a mount namespace of its own, mounts a ``/proc`` of the new namespace;
  the kernel ignores a SIGKILL sent to an init from inside its namespace;
* ``exec`` (one per command, instead of running the shell directly) joins that PID and mount
  namespace and forks the command's shell there, after dropping the jail's capabilities, then
  waits for it and exits with its status. ``ps`` inside shows the namespace's own PIDs, and no
  PID a command can name is the agent's, the relay's or this launcher's;
* :meth:`Jail.kill` (the agent's ``kill_leftovers``) SIGKILLs the init from outside: the kernel
  then ends every process of the namespace at once, and none of them can fork meanwhile, so a
  fork storm that filled the sandbox's pids limit cannot outrun it. The agent then makes a
  fresh jail for later commands (procs.py ``kill_jail``).

The agent cannot do this itself: a multithreaded process that unshared a PID namespace can no
longer start threads (clone(2), EINVAL), hence the two single-threaded helpers. The agent keeps
its own view from outside: its process table lists the commands under their outer PIDs, which
is what its timeouts and kills use.

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
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
NO_SUBREAPER = "no-subreaper"  # exec's option: the command is no subreaper (the vendor's shell)
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_LOWER = 3
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
CAP_NUMBERS = {"CAP_SETPCAP": 8, "CAP_IPC_LOCK": 14, "CAP_SYS_CHROOT": 18, "CAP_SYS_ADMIN": 21}
CAP_VERSION_3 = 0x20080522


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

    def __init__(self, holder_pid, init_pid, private_proc, drop, holder=None):
        self.holder_pid = holder_pid
        self.init_pid = init_pid
        self.private_proc = private_proc  # the init mounted a /proc of the namespace
        self.drop = tuple(drop)
        self.holder = holder  # the holder's Popen, to wait for it once the namespace is killed

    def describe(self):
        return "pid-namespace" + ("+proc" if self.private_proc else "")

    def protected(self):
        return {self.holder_pid, self.init_pid}

    def members(self):
        """Outer PIDs of every process in the namespace but its init (none: an idle jail)."""
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
        return out

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

    def wrap(self, argv, cwd=None, subreaper=True):
        """The argv that runs ``argv`` inside the namespace (as a subreaper unless told not to)."""
        caps = ",".join(str(c) for c in self.drop) or "-"
        return [sys.executable, "-I", "-S", SCRIPT, "exec", str(self.init_pid), "1" if self.private_proc else "0",
                caps, cwd or ""] + ([] if subreaper else [NO_SUBREAPER]) + ["--"] + list(argv)


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


def start(drop=None):
    """Make the namespace; (Jail, "") or (None, why not).

    ``drop``: the capabilities to drop, for a jail made again after the first was killed (the
    backend's variable is read, and removed, by the first call)."""
    import subprocess  # here: the per-command launcher (run_exec) starts faster without it

    if drop is None:
        drop = requested()
    if drop is None:
        return None, "not requested (%s unset)" % ENV_VAR
    try:
        # PID 1 of the commands' namespace: an environment of its own, nothing of the agent's
        holder = subprocess.Popen([sys.executable, "-I", "-S", SCRIPT, "hold"], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, close_fds=True, cwd="/",
                                  env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
    except OSError as e:
        return None, "the jail holder did not start: %s" % e
    words = holder.stdout.readline().decode("ascii", "replace").split()
    holder.stdout.close()
    if len(words) < 3 or words[0] != "ready":
        holder.kill()
        holder.wait()
        return None, " ".join(words) or "the jail holder exited"
    return Jail(holder.pid, int(words[1]), words[2] == "proc", drop, holder), ""


# --- the two helper programs (each in a process of its own) -------------------------------


def drop_capabilities(libc, caps):  # pragma: no mutate block (runs between fork and exec)
    """Drop ``caps`` from the bounding and ambient sets, then from the other three.

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
        data[word].effective &= mask
        data[word].permitted &= mask
        data[word].inheritable &= mask
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def hold():  # pragma: no mutate block (its own process)
    """Unshare a PID namespace, fork its init, print ``ready <init pid> <proc|why>``, stay."""
    import signal  # here, not at the top: the per-command launcher starts faster without it

    libc = _libc()
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the agent died: so does the namespace
    if libc.unshare(CLONE_NEWPID) != 0:
        sys.stdout.write("failed unshare(CLONE_NEWPID): %s\n" % _errno_text())
        return 1
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _init(libc, w)
    os.close(w)
    status = os.read(r, 200).decode("ascii", "replace").strip() or "no-status"
    os.close(r)
    sys.stdout.write("ready %d %s\n" % (pid, status))
    sys.stdout.flush()
    os.close(1)
    os.waitpid(pid, 0)  # the init never exits while this lives; if it does, so does this
    return 1


def _init(libc, status_fd):  # pragma: no mutate block (PID 1 of the namespace)
    import signal

    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    status = "proc"
    if libc.unshare(CLONE_NEWNS) != 0:
        status = "no-mount-namespace:" + _errno_text().replace(" ", "_")
    elif libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0 or \
            libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
        status = "no-private-proc:" + _errno_text().replace(" ", "_")
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
    os.write(status_fd, status.encode())
    os.close(status_fd)
    while True:
        signal.sigwait([signal.SIGCHLD])
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break


def run_exec(init_pid, private_proc, caps, cwd, argv, subreaper=True):  # pragma: no mutate block (its own process)
    """Join the namespace, fork ``argv`` there with the jail's caps dropped, exit as it did."""
    libc = _libc()
    # both descriptors before either setns: after the mount one, /proc is the namespace's
    fds = [(os.open("/proc/%d/ns/pid" % init_pid, os.O_RDONLY), CLONE_NEWPID)]
    if private_proc:
        fds.append((os.open("/proc/%d/ns/mnt" % init_pid, os.O_RDONLY), CLONE_NEWNS))
    for fd, kind in fds:
        if libc.setns(fd, kind) != 0:
            sys.stderr.write("farm: cannot enter the command namespace: %s\n" % _errno_text())
            return 126
        os.close(fd)
    if private_proc:
        os.chdir(cwd or "/")  # setns moved the working directory to the namespace's root
    try:
        pid = os.fork()
    except OSError as e:  # the pids limit is full, or the namespace is being torn down
        sys.stderr.write("farm: cannot start the command: %s (the sandbox's process limit is reached, "
                         "or its processes are being killed)\n" % (e.strerror or e))
        return 126
    if pid == 0:
        try:
            os.setsid()
            _default_signals()
            if subreaper:
                libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            drop_capabilities(libc, caps)
            os.execvp(argv[0], argv)
        except OSError as e:
            sys.stderr.write("farm: cannot run %s: %s\n" % (argv[0], e))
        os._exit(127)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return _die_by(libc, os.WTERMSIG(status))
    return os.WEXITSTATUS(status)


def _default_signals():  # pragma: no mutate block (runs between fork and exec)
    """What Python ignores at its start (SIGPIPE, SIGXFSZ) back to the default for the command,
    as subprocess's restore_signals does: ``yes | head -1`` ends ``yes`` by SIGPIPE, not with
    "Broken pipe" on its stderr. ``_signal``: ``signal`` (enum) would cost every launch ~10 ms."""
    import _signal

    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(_signal, name):
            _signal.signal(getattr(_signal, name), _signal.SIG_DFL)


def _die_by(libc, sig):  # pragma: no mutate block (its own process)
    """End as the command's shell ended, by its signal, so that the agent reads the shell's own
    status (``exit 137`` and a SIGKILL stay apart: the vendor's Bash rules report -9 for the
    one). No core file of this launcher; 128 + sig if the signal does not end it."""
    import _signal

    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    try:
        _signal.signal(sig, _signal.SIG_DFL)  # Python's own handlers (SIGINT) and SIG_IGN (SIGPIPE)
    except (OSError, ValueError):
        pass
    os.kill(os.getpid(), sig)
    return 128 + sig


def main(args):  # pragma: no mutate block (its own process)
    if args[:1] == ["hold"]:
        return hold()
    if args[:1] == ["exec"] and "--" in args:
        cut = args.index("--")
        init_pid, private_proc, caps, cwd = args[1:5]
        numbers = [int(c) for c in caps.split(",") if c and c != "-"]
        return run_exec(int(init_pid), private_proc == "1", numbers, cwd, args[cut + 1:],
                        subreaper=NO_SUBREAPER not in args[5:cut])
    sys.stderr.write("usage: jail.py hold | exec INIT_PID 0|1 CAPS CWD [%s] -- ARGV...\n" % NO_SUBREAPER)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
