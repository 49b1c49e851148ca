"""The jail's resident spawner: the commands' namespace's init forks every command (issue 41).

Part of the sandbox agent (see server.py): stdlib-only and Python >= 3.8. Both ends of one
small protocol live here: :class:`Spawner` in the agent, :func:`serve` in the init (jail.py).

Before, each command was ``python3 jail.py exec ...``: a new interpreter that joined the
namespace, forked the shell and waited for it, 20-30 ms of every tool call. Now the init, which
lives as long as the namespace, forks each command itself (a fork of a small, already running
process: well under a millisecond) and execs the shell there, keeping what the launcher did:

* the command is in the namespace (its PIDs and its ``/proc``), in a session of its own, a
  subreaper unless told not to (the vendor's shell is none), with the jail's capabilities
  dropped from all five sets, SIGPIPE and SIGXFSZ at their defaults, no signal blocked;
* it joins the commands' cgroup (contain.py) before its exec, and where that group's pids limit
  is full it says so and exits 126 without starting the shell, as the launcher's fork did;
* the shell's own status comes back (an exit code, or the signal that ended it), and the agent
  knows the shell by its PID in the agent's namespace, so that its timeouts and kills (procs.py)
  work on the shell itself.

Wire: requests go agent -> init on a stream (a command's text has no datagram's size limit):
a 4-byte length with the command's stdin, stdout and stderr as SCM_RIGHTS, then that many bytes
of JSON. Replies come back as datagrams (SOCK_SEQPACKET): ``pid TOKEN`` from the command itself
before its exec, whose sender PID the kernel translates into the agent's namespace (SO_PASSCRED);
``exit TOKEN STATUS`` from the init once it reaped the command; ``fail TOKEN ERRNO`` when the
init could not fork. The init's end closing means the namespace is gone, and everything in it.
"""

import _thread
import array
import errno
import json
import os
import select
import signal
import socket
import struct
import subprocess
import threading

HEADER = struct.Struct("!I")
CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
STARTED_S = 60.0  # how long the agent waits for a command to say it started
STANDBY_IDLE_S = 0.02  # the init idle that long after a forked command started: it forks the next standby
PR_SET_CHILD_SUBREAPER = 36
NOT_STARTED = ("farm: cannot start the command: %s (the sandbox's process limit is reached, "
               "or its processes are being killed)\n")


class SpawnedProcess:
    """The agent's handle on one command the init started: what the agent's callers use of a
    ``subprocess.Popen`` (``pid``, ``stdout``, ``stderr``, ``poll``, ``wait``, ``returncode``)."""

    def __init__(self, argv, stdout, stderr):
        self.args = argv
        self.pid = None  # the shell's PID in the agent's namespace
        self.stdin = None
        self.stdout = stdout
        self.stderr = stderr
        self.returncode = None
        self._error = None  # errno when it could not start
        self._started = threading.Event()
        self._ended = threading.Event()

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def _start(self, pid, error=None):
        self.pid, self._error = pid, error
        self._started.set()

    def _end(self, returncode):
        if not self._started.is_set():
            # it died before it was named (its namespace killed meanwhile): a command that ran
            # for no time, with that status, not a failure to start
            self._start(None)
        self.returncode = returncode
        self._ended.set()


class Spawner:
    """The agent's end of the init's two sockets (jail.start made them)."""

    def __init__(self, requests, replies):
        self._requests = requests
        self._replies = replies
        self._send = threading.Lock()
        self._lock = threading.Lock()
        self._running = {}  # token -> SpawnedProcess, until its exit is read
        self._tokens = 0
        self.dead = False  # the init's end closed: its namespace is gone
        threading.Thread(target=self._read_replies, name="spawner", daemon=True).start()

    def spawn(self, argv, cwd=None, env=None, umask=None, subreaper=True, merge_stderr=False):
        """Start ``argv`` in the namespace with its stdin on /dev/null and its stdout and stderr
        on pipes (``merge_stderr``: one pipe for both); the SpawnedProcess once it runs.

        Raises:
            OSError: the init could not fork (EAGAIN: the sandbox's process limit), or the
                namespace is gone (ESRCH).
        """
        out_r, out_w = os.pipe()
        err_r, err_w = (None, out_w) if merge_stderr else os.pipe()
        devnull = os.open(os.devnull, os.O_RDONLY)
        body = json.dumps({"argv": list(argv), "cwd": cwd, "env": env if env is not None else dict(os.environ),
                           "umask": umask, "subreaper": bool(subreaper)}).encode("ascii")
        proc = SpawnedProcess(list(argv), os.fdopen(out_r, "rb"), None if err_r is None else os.fdopen(err_r, "rb"))
        with self._lock:
            self._tokens += 1
            token = self._tokens
            self._running[token] = proc
        message = b"%d " % token + body
        try:
            with self._send:
                if self.dead:
                    raise OSError(errno.ESRCH, "the commands' namespace is gone")
                _send(self._requests, message, [devnull, out_w, err_w])
        except OSError as e:
            self._forget(token)
            _close(proc)
            raise OSError(errno.ESRCH, "the commands' namespace is gone (%s)" % (e.strerror or e)) from e
        finally:
            for fd in {devnull, out_w, err_w}:
                os.close(fd)  # the init holds its own copies now
        if not proc._started.wait(STARTED_S) or proc._error is not None:
            self._forget(token)
            _close(proc)
            code = proc._error or errno.ETIMEDOUT
            raise OSError(code, os.strerror(code))
        return proc

    def _forget(self, token):
        with self._lock:
            self._running.pop(token, None)

    def _read_replies(self):  # pragma: no mutate block (a thread of the agent's)
        space = socket.CMSG_SPACE(CREDENTIALS.size)
        while True:
            try:
                data, ancillary, _, _ = self._replies.recvmsg(64, space)
            except OSError:
                data = b""
            if not data:
                break
            words = data.split()
            with self._lock:
                proc = self._running.get(int(words[1]))
                if words[0] in (b"exit", b"ended"):
                    self._running.pop(int(words[1]), None)
            if proc is None:
                continue
            if words[0] == b"pid":
                proc._start(_sender(ancillary))
            elif words[0] == b"fail":
                proc._start(None, int(words[2]))
            elif words[0] in (b"exit", b"ended"):
                if words[0] == b"ended":
                    proc._start(None)  # it never ran (its stderr says why); its status is this
                status = int(words[2])
                proc._end(-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
        # the init is gone, and with it every process of its namespace: killed, all of them
        with self._send, self._lock:
            self.dead = True
            left, self._running = list(self._running.values()), {}
            for sock in (self._requests, self._replies):
                sock.close()
        for proc in left:
            proc._end(-signal.SIGKILL)


def _send(sock, message, fds):
    """One request on a stream: its length with the descriptors, then the message."""
    rights = array.array("i", fds)
    sock.sendmsg([HEADER.pack(len(message))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
    sock.sendall(message)


def _sender(ancillary):
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            return CREDENTIALS.unpack(data[:CREDENTIALS.size])[0]
    return None


def _close(proc):
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()


# --- the init's end -----------------------------------------------------------------------


def serve(libc, caps, requests_fd, replies_fd, join_fds, home_fds, drop_capabilities):  # pragma: no mutate block
    """The init's loop: start what the agent asks for, reap every process that ends in the
    namespace, report the commands' statuses. Returns when the agent's end closes.

    Two ways to start a command. A command that must be a subreaper (farm's own rules) is
    forked, and the child sets itself up and execs (``_command``). Any other (the vendor's
    shell) is started by ``posix_spawn``, which does not copy this process's memory only to
    throw it away at the exec (on a virtual machine that copy and its teardown are most of a
    millisecond); the init first moves itself into the commands' cgroup so that the command
    is born there, under its limits, and then moves back (``home_fds``)."""
    # once for every command it will start: the jail's capabilities gone from all that an
    # exec passes on (kept effective here: naming a command's PID to the agent needs
    # CAP_SYS_ADMIN, ``_report``), Python's ignored signals back to their defaults
    drop_capabilities(libc, caps, keep_effective=True)
    for name in ("SIGPIPE", "SIGXFSZ"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    requests = socket.socket(fileno=requests_fd)
    replies = socket.socket(fileno=replies_fd)
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD wakes the select
    # posix_spawn where it can do all a command needs: its session (glibc >= 2.26), and its
    # cgroup where there is one (a way back for the init)
    spawning = hasattr(os, "POSIX_SPAWN_DUP2") and len(home_fds) == len(join_fds)
    running = {}  # PID in the namespace -> token
    standby = _Standby(libc, replies, join_fds)
    while True:
        # the next standby is forked once the init has had nothing to do for a moment (a
        # command just started, it has the machine's cores first), off any command's path
        idle = STANDBY_IDLE_S if standby.wanted and standby.pid is None else None
        ready = select.select([requests, wake_r], [], [], idle)[0]
        if wake_r in ready:
            while _read_some(wake_r):
                pass
        if requests in ready:
            request = _receive(requests)
            if request is None:
                return
            token, spec, fds, _ = request
            try:
                if spawning and not spec.get("subreaper"):
                    pid = _spawn(token, spec, fds, replies, join_fds, home_fds)
                else:
                    standby.wanted = True
                    pid = standby.take(request) or _fork(libc, request, replies, join_fds)
            except NotImplementedError:  # this Python or libc cannot start a session by posix_spawn
                spawning = False
                pid = _fork(libc, request, replies, join_fds)
            if pid is not None:
                running[pid] = token
            for fd in fds:
                os.close(fd)
        ended = _reap(running, replies)
        if not ready:
            standby.prepare(ended)
        elif standby.pid in ended:
            standby.close()  # it died waiting (killed): another once idle


class _Standby:  # pragma: no mutate block (PID 1)
    """A child forked ahead of time that waits, on a socket of its own, for the next command
    that needs a fork (a subreaper: farm's own rules), and becomes it. The fork, about a
    millisecond of a virtual machine's time, is then not on the command's path.

    It waits in the init's cgroup, outside the commands' limits, and joins theirs once it has
    a request. Until then it holds the init's capabilities, which no command can hold: that
    is how the agent tells it from the commands when it counts them (jail.py ``Jail.own``)."""

    def __init__(self, libc, replies, join_fds):
        self.libc, self.replies, self.join_fds = libc, replies, join_fds
        self.wanted = False  # a command needed a fork: later ones likely will too
        self.pid = None
        self.sock = None

    def prepare(self, ended):
        """Fork one if wanted and there is none (or it died: ``ended`` holds its PID)."""
        if not self.wanted or (self.pid is not None and self.pid not in ended):
            return
        self.close()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = os.fork()
        except OSError:
            mine.close()
            theirs.close()
            return  # the sandbox's process limit: a command will be forked when it comes
        if pid == 0:
            mine.close()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                _settle(self.libc, subreaper=True)  # only commands that need a fork come here
                request = _receive(theirs)
            except BaseException:
                os._exit(1)
            if request is None:
                os._exit(0)
            _command(self.libc, request, self.replies, self.join_fds, settled=True)
        theirs.close()
        self.pid, self.sock = pid, mine

    def take(self, request):
        """Hand ``request`` over; the standby's PID (now the command's), or None (there is none)."""
        if self.pid is None:
            return None
        _, _, fds, message = request
        pid = self.pid
        try:
            _send(self.sock, message, fds)  # as the agent sent it: nothing to encode again
        except OSError:
            os.kill(pid, signal.SIGKILL)  # half a request: it must not go on
            pid = None
        self.close()
        return pid

    def close(self):
        if self.sock is not None:
            self.sock.close()
        self.pid = self.sock = None


def _fork(libc, request, replies, join_fds):  # pragma: no mutate block (PID 1)
    """Fork the command (``_command`` in the child); its PID, or None (the agent was told)."""
    try:
        pid = os.fork()
    except OSError as e:
        replies.send(b"fail %d %d" % (request[0], e.errno or errno.EAGAIN))
        return None
    if pid == 0:
        _command(libc, request, replies, join_fds)
    return pid


def _spawn(token, spec, fds, replies, join_fds, home_fds):  # pragma: no mutate block (PID 1)
    """posix_spawn the command from inside its cgroup; its PID, or None (the agent was told)."""
    argv = spec["argv"]
    umask = spec.get("umask")
    for fd in fds:
        os.set_inheritable(fd, False)  # the command gets them as 0, 1 and 2 only
    try:
        os.chdir(spec.get("cwd") or "/")
    except OSError as e:
        return _not_started(token, fds, replies, 127, "farm: cannot run in %s: %s\n" % (spec.get("cwd"), e.strerror))
    before = os.umask(int(umask)) if umask is not None else None
    for fd in join_fds:
        _write(fd, b"0")
    try:
        pid = os.posix_spawn(argv[0], argv, spec["env"], setsid=True,
                             file_actions=[(os.POSIX_SPAWN_DUP2, fd, n) for n, fd in enumerate(fds)])
    except OSError as e:
        pid = None
        error = e
    finally:
        for fd in home_fds:
            _write(fd, b"0")
        if before is not None:
            os.umask(before)
        os.chdir("/")
    if pid is None:
        if error.errno in (errno.EAGAIN, errno.ENOMEM):  # the commands' process limit: as a fork
            replies.send(b"fail %d %d" % (token, error.errno))
            return None
        return _not_started(token, fds, replies, 127, "farm: cannot run %s: %s\n" % (argv[0], error.strerror))
    try:
        _report(replies, token, pid)
    except OSError as e:
        os.kill(pid, signal.SIGKILL)  # no way to name it to the agent: it must not run unseen
        replies.send(b"fail %d %d" % (token, e.errno or errno.EPERM))
    return pid


def _report(replies, token, pid):
    """``pid TOKEN`` naming ``pid`` as the agent's namespace numbers it: the kernel translates a
    PID sent as credentials, and lets a process name another than itself with CAP_SYS_ADMIN."""
    ancillary = [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, CREDENTIALS.pack(pid, os.getuid(), os.getgid()))]
    replies.sendmsg([b"pid %d" % token], ancillary)


def _not_started(token, fds, replies, code, message):
    """Tell the command's stderr why it did not start, and the agent that it ended so."""
    _write(fds[2], message.encode(errors="replace"))
    replies.send(b"ended %d %d" % (token, code << 8))
    return None


def _write(fd, data):
    try:
        os.write(fd, data)
    except OSError:
        pass  # a cgroup gone (the sandbox is closing), a reader gone: nothing to do about it


def _read_some(fd):
    try:
        return os.read(fd, 512)
    except OSError:
        return b""


def _reap(running, replies):  # pragma: no mutate block (PID 1)
    """Reap whatever ended: the commands' exits go to the agent, orphans just go. Returns the
    PIDs reaped."""
    ended = set()
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.add(pid)
        token = running.pop(pid, None)
        if token is not None:
            replies.send(b"exit %d %d" % (token, status))


def _receive(sock):  # pragma: no mutate block (PID 1)
    """(token, spec, [stdin, stdout, stderr], the message as sent) of one request, or None once
    the agent is gone."""
    fds = array.array("i")
    head = b""
    while len(head) < HEADER.size:
        data, ancillary, _, _ = sock.recvmsg(HEADER.size - len(head), socket.CMSG_SPACE(3 * fds.itemsize))
        if not data:
            return None
        head += data
        for level, kind, raw in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(raw[:len(raw) - len(raw) % fds.itemsize])
    size = HEADER.unpack(head)[0]
    body = bytearray()
    while len(body) < size:
        data = sock.recv(min(size - len(body), 1 << 20))
        if not data:
            return None
        body += data
    message = bytes(body)
    token, _, spec = message.partition(b" ")
    return int(token), json.loads(spec.decode("ascii")), list(fds), message


def _probe_task():
    """Start a thread and wait for it to end; RuntimeError where no task can start."""
    done = _thread.allocate_lock()
    done.acquire()
    _thread.start_new_thread(done.release, ())
    done.acquire()


def _settle(libc, subreaper):  # pragma: no mutate block (a forked child)
    """What a forked command needs before its request is known (a standby does it ahead): a
    session of its own, a subreaper where asked."""
    os.setsid()
    if subreaper:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _command(libc, request, replies, join_fds, settled=False):  # pragma: no mutate block (a forked child)
    """In the forked child: become the command (exec), or exit 126 / 127 saying why not; it
    never returns (whatever goes wrong, the child must not go on as a second init).

    What every command has in common the init did once for all (``serve``): the jail's
    capabilities dropped from what an exec passes on, SIGPIPE and SIGXFSZ at their defaults,
    no signal blocked. ``settled``: ``_settle`` was done (a standby)."""
    token, spec, fds, _ = request
    try:
        replies.send(b"pid %d" % token)  # the kernel adds this process's PID, as the agent sees it
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        if not settled:
            _settle(libc, spec.get("subreaper"))
        for fd in join_fds:
            _write(fd, b"0")  # the commands' cgroup (contain.py); a group gone (the sandbox is closing): stay
        if join_fds:
            # joining is allowed past the group's pids limit, starting a task is not: start a
            # thread (a task to the pids limit, and far cheaper than a fork) rather than exec a
            # shell that could start nothing, as the launcher's fork of the shell did
            try:
                _probe_task()
            except RuntimeError as e:
                os.write(2, (NOT_STARTED % e).encode())
                os._exit(126)
        if spec.get("umask") is not None:
            os.umask(int(spec["umask"]))
        try:
            os.chdir(spec.get("cwd") or "/")
        except OSError as e:
            _write(2, ("farm: cannot run in %s: %s\n" % (spec.get("cwd"), e.strerror)).encode(errors="replace"))
            os._exit(127)
        argv = spec["argv"]
        os.execvpe(argv[0], argv, spec["env"])
    except BaseException as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else repr(e)
        _write(2, ("farm: cannot run %s: %s\n" % (spec["argv"][0], why)).encode(errors="replace"))
    os._exit(127)
