"""Keeps one sandbox agent alive across exec streams and across its own death (container backends).

The sandbox agent (inside/server.py) speaks JSON lines on its stdin/stdout and shuts down when
its stdin closes. On Kubernetes and with docker/podman the stream is an exec session that can
break, so the agent must not be the exec'd process. Instead:

  relay.py serve NAME -- ARGV...   PID 1 of the task container: starts ARGV (the agent) with
                                   pipes and listens on the abstract unix socket NAME; the newest
                                   connection is the client; responses produced while no client
                                   is attached are dropped (a re-sent request id gets the
                                   remembered response from the agent).
  relay.py attach NAME             what each exec stream runs: copies stdin -> socket and
                                   socket -> stdout until either side ends.

Where the agent's commands share the agent's PID namespace (a Kubernetes pod: Pod Security
refuses the capabilities of inside/jail.py), a command such as ``kill -9 -1`` or
``pkill -f python`` kills the agent. It cannot kill the relay: the kernel never delivers a
SIGKILL or SIGSTOP sent from inside a PID namespace to that namespace's init, nor any other
signal the init has no handler for; the relay takes SIGTERM/SIGINT with ``sigwaitinfo`` and
obeys only those sent from outside the namespace (the kubelet, the engine: ``si_pid == 0``).
So when the agent dies by a signal, the relay records it (which signal, which requests were
running), kills every process the dead agent's commands left (as the agent itself does when it
shuts down), answers each of those requests with an error of type ``SandboxAgentKilled`` (also
when the same id is re-sent), and starts the agent again; later requests reach the new agent.
The ``relay_status`` op (restarts and the last kills) is answered by the relay itself.

Shipped into the sandbox next to server.py and proctable.py (which it uses to find what a dead
agent left); stdlib-only and Python >= 3.8 like the agent.
"""

import collections
import json
import os
import re
import signal
import socket
import sys
import threading
import time

# Run as a script (inside a sandbox, possibly under -I) the directory of this file is not on
# sys.path; imported as farm.sandbox.inside.relay (the host, tests) the package provides it.
if __package__:
    from . import proctable
else:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import proctable

BUF = 1 << 16
KILLED = "SandboxAgentKilled"  # error type of a request whose agent was killed under it
STATUS_OP = "relay_status"
MAX_RESTARTS = 50  # past this, a sandbox whose agent keeps dying is lost (infrastructure)
KEPT_EVENTS = 20
KEPT_IDS = 4096
DESCRIBE_LIMIT = 1 << 16  # parse requests up to this size to say what was running
# the head of a request / response line as channel.py and server.py encode them
_REQUEST_HEAD = re.compile(rb'\{"id":"([^"\\]{1,200})","op":"([^"\\]{1,64})"')
_RESPONSE_HEAD = re.compile(rb'\{"id":"([^"\\]{1,200})"')
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _address(name):
    return "\0" + name  # abstract namespace: no file to delete, scoped to the network namespace


def log(msg):
    sys.stderr.write("farm relay: %s\n" % msg)
    sys.stderr.flush()


def signal_name(sig):
    try:
        return signal.Signals(sig).name
    except ValueError:
        return "signal %d" % sig


def describe_request(op, line):
    """A short account of a request for the kill record: the tool and its command or path."""
    what = {"op": op}
    if op not in ("exec", "tool") or len(line) > DESCRIBE_LIMIT:
        return what
    try:
        args = json.loads(line).get("args") or {}
    except ValueError:
        return what
    if op == "tool":
        what["tool"] = str(args.get("name"))
        args = args.get("args") or {}
    for key in ("command", "file_path", "pattern"):
        if isinstance(args.get(key), str):
            what[key] = args[key][:300]
            break
    return what


def kill_strays():
    """SIGKILL every process below the relay: what a dead agent's commands left (exec sessions
    have no parent inside the namespace, so they are not below it)."""
    killed = set()
    for _ in range(100):
        # zombies included: one below the relay is still signalled and counted, once
        table = proctable.process_table(zombies=True)
        pids = proctable.descendants(os.getpid(), table) - killed_and_gone(killed, table)
        if not pids:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: nothing forks while we kill
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        killed |= pids
        time.sleep(0.005)
    return len(killed)


def whole_lines(buffered):
    """(the complete lines in ``buffered``, what follows the last newline)."""
    cut = buffered.rfind(b"\n") + 1
    return buffered[:cut], buffered[cut:]


def killed_and_gone(killed, table):
    """Killed processes still listed: zombies the reaper has not collected yet (or gone since)."""
    return {pid for pid in killed & set(table) if proctable.is_zombie(pid)}


class Incarnation:
    """One run of the agent: its pid, its pipes, and the requests it has not answered."""

    def __init__(self, argv):
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        actions = [(os.POSIX_SPAWN_DUP2, r_in, 0), (os.POSIX_SPAWN_DUP2, w_out, 1)]
        # the relay blocks its stop signals (see serve); the agent and its commands must not
        self.pid = os.posix_spawnp(argv[0], argv, dict(os.environ), file_actions=actions, setsigmask=(),
                                   setsigdef=(signal.SIGPIPE, signal.SIGXFSZ) + _STOP_SIGNALS)
        os.close(r_in)
        os.close(w_out)
        self.stdin = w_in
        self.stdout = r_out
        self.inflight = collections.OrderedDict()  # id -> what it is
        self.answered = collections.deque(maxlen=KEPT_IDS)
        self.reader = None  # the thread that pumps its stdout

    def close_stdin(self):
        # stdout is closed by its reader once it sees the end (a closed fd's number can be
        # reused at once, and a reader about to read it would then read someone else's pipe)
        try:
            os.close(self.stdin)
        except OSError:
            pass


class Relay:
    def __init__(self, name, argv):
        self.argv = argv
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(_address(name))
        self.listener.listen(4)
        self.lock = threading.Lock()  # client, agent, killed, events
        self.send_lock = threading.Lock()
        self.stdin_lock = threading.Lock()
        self.client = None
        self.stopping = False
        self.killed = collections.OrderedDict()  # id -> the error line that answers it
        self.events = []
        self.restarts = 0
        self.agent = Incarnation(argv)
        self.t0 = time.monotonic()

    # --- the client --------------------------------------------------------------------------

    def drop(self, conn):
        with self.lock:
            if self.client is conn:
                self.client = None
        try:
            conn.close()
        except OSError:
            pass

    def send(self, conn, data):
        if conn is None:
            return
        try:
            with self.send_lock:
                conn.sendall(data)
        except OSError:
            self.drop(conn)

    def start_reader(self, inc):
        inc.reader = threading.Thread(target=self.pump_out, args=(inc,), name="relay-out", daemon=True)
        inc.reader.start()

    def pump_out(self, inc):
        pending = b""
        while True:
            try:
                data = os.read(inc.stdout, BUF)
            except OSError:
                data = b""
            if not data:
                os.close(inc.stdout)
                return  # the reaper decides what the agent's end means
            # whole lines only: a client that attaches late must never see half a response
            data, pending = whole_lines(pending + data)
            if not data:
                continue
            with self.lock:
                for line in data.split(b"\n")[:-1]:
                    m = _RESPONSE_HEAD.match(line)
                    if m and inc.inflight.pop(m.group(1), None) is not None:
                        inc.answered.append(m.group(1))
                conn = self.client
            self.send(conn, data)

    def pump_in(self, conn):
        pending = b""
        while True:
            try:
                data = conn.recv(BUF)
            except OSError:
                data = b""
            if not data:
                break
            # forward whole lines only, so a stream cut mid-line never splices two requests
            chunk, pending = whole_lines(pending + data)
            if not chunk:
                continue
            with self.lock:
                if self.client is not conn:
                    break
            answers = []
            # routed and written under one lock, so a request is recorded against the agent
            # that receives it even if that agent is being replaced meanwhile
            with self.stdin_lock:
                inc = self.agent
                forward = []
                for line in chunk.split(b"\n")[:-1]:
                    answer = self.route(line, inc)
                    if answer is None:
                        forward.append(line + b"\n")
                    else:
                        answers.append(answer)
                if forward:
                    try:
                        _write_all(inc.stdin, b"".join(forward))
                    except OSError:
                        pass  # the agent is dying: agent_ended answers what it had been sent
            for answer in answers:
                self.send(conn, answer)
        self.drop(conn)

    def route(self, line, inc):
        """None to forward the request to ``inc``, else the line that answers it here."""
        m = _REQUEST_HEAD.match(line)
        if m is None:
            return None  # the agent answers a malformed line with a protocol error
        rid, op = m.group(1), m.group(2).decode("ascii", "replace")
        with self.lock:
            if rid in self.killed:
                return self.killed[rid]
            if op == STATUS_OP:
                return self.response(rid, {"restarts": self.restarts, "pid": os.getpid(),
                                           "kills": self.events[-KEPT_EVENTS:]})
            if rid not in inc.inflight:
                inc.inflight[rid] = describe_request(op, line)
        return None

    @staticmethod
    def response(rid, result=None, error=None):
        payload = {"id": rid.decode("ascii", "replace"), "ok": error is None}
        if error is None:
            payload["result"] = result
        else:
            payload["error"] = error
        return json.dumps(payload, separators=(",", ":")).encode("utf-8") + b"\n"

    # --- the agent's end -----------------------------------------------------------------------

    def reap(self):
        """PID 1 reaps every orphan; the agent's own end is handled in ``agent_ended``."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WUNTRACED)
            except ChildProcessError:
                time.sleep(0.05)
                continue
            except InterruptedError:
                continue
            with self.lock:
                inc = self.agent
            if pid != inc.pid:
                continue
            if os.WIFSTOPPED(status):
                # `kill -STOP -1` would leave every request hanging until its timeout
                log("agent stopped by %s; continued" % signal_name(os.WSTOPSIG(status)))
                os.kill(pid, signal.SIGCONT)
                continue
            self.agent_ended(inc, status)

    def agent_ended(self, inc, status):
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + (sig or 0)
        if sig is None or self.stopping or self.restarts >= MAX_RESTARTS:
            why = "exited with %d" % code if sig is None else "killed by %s" % signal_name(sig)
            if sig is not None and not self.stopping:
                why += " after %d restarts" % self.restarts
            log("agent %s" % why)
            os._exit(code)
        # what the agent wrote before it died is delivered first: a request it answered was not killed
        if inc.reader is not None:
            inc.reader.join(0.5)
        name = signal_name(sig)
        message = ("the sandbox agent was killed by signal %d (%s) while this request ran: a process "
                   "of the sandbox (the agent's own command, or the out-of-memory killer) killed it; "
                   "farm started it again, and what this request had done or printed is lost"
                   % (sig, name))
        with self.stdin_lock, self.lock:
            event = {"signal": sig, "name": name, "at_s": round(time.monotonic() - self.t0, 3),
                     "requests": list(inc.inflight.values())}
            error = {"type": KILLED, "message": message, "signal": sig}
            for rid in inc.inflight:
                self.remember(rid, self.response(rid, error=error))
            lost = dict(error, message="the sandbox agent was restarted after this request ran, and "
                                       "its answer was lost")
            for rid in inc.answered:
                if rid not in self.killed:
                    self.remember(rid, self.response(rid, error=lost))
            answers = [self.killed[rid] for rid in inc.inflight]
            # what the dead agent started dies with it, as with the agent's own shutdown: a
            # command that outlives it would be out of every later kill's reach (and one that
            # kills python in a loop would kill each new agent)
            event["killed_processes"] = kill_strays()
            self.events.append(event)
            del self.events[:-KEPT_EVENTS]
            self.restarts += 1
            self.agent = self.respawn()
            conn = self.client
        inc.close_stdin()
        log("agent killed by %s while %d requests ran; restarted (%d)" % (name, len(event["requests"]),
                                                                          self.restarts))
        for line in answers:
            self.send(conn, line)

    def respawn(self):
        """A new agent and its reader; after a fork storm the pids come back only as the killed
        processes are reaped, so reap (nothing of ours is alive to steal a status from) and retry."""
        inc = None
        for attempt in range(50):
            while inc is None:
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
            try:
                if inc is None:
                    inc = Incarnation(self.argv)
                self.start_reader(inc)
                return inc
            except (OSError, RuntimeError) as e:  # EAGAIN from fork, "can't start new thread"
                if attempt == 49:
                    log("cannot start the agent again: %r" % e)
                    os._exit(1)
                time.sleep(0.1)

    def remember(self, rid, line):
        self.killed[rid] = line
        while len(self.killed) > KEPT_IDS:
            self.killed.popitem(last=False)

    def stop(self):
        self.stopping = True
        with self.stdin_lock:
            try:
                os.close(self.agent.stdin)  # the agent kills everything it started and exits
            except OSError:
                pass

    def watch_signals(self):
        """Stop on SIGTERM/SIGINT from outside the sandbox; ignore one a command sent.

        As PID 1 of a namespace, a sender inside it has a pid here, one outside has none."""
        while True:
            info = signal.sigwaitinfo(set(_STOP_SIGNALS))
            if os.getpid() == 1 and info.si_pid != 0:
                log("ignored %s from pid %d inside the sandbox" % (signal_name(info.si_signo), info.si_pid))
                continue
            self.stop()

    def serve(self):
        threading.Thread(target=self.watch_signals, name="relay-signals", daemon=True).start()
        threading.Thread(target=self.reap, name="relay-reap", daemon=True).start()
        self.start_reader(self.agent)
        while True:
            conn, _ = self.listener.accept()
            with self.lock:
                old, self.client = self.client, conn
            if old is not None:
                try:
                    old.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            threading.Thread(target=self.pump_in, args=(conn,), name="relay-in", daemon=True).start()


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def serve(name, argv):
    # blocked before any thread or child exists, so only watch_signals ever takes them
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    Relay(name, argv).serve()


def attach(name, wait_s=60.0):
    deadline = time.monotonic() + wait_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(_address(name))
            break
        except OSError as e:
            sock.close()
            if time.monotonic() > deadline:
                sys.stderr.write("farm relay: no agent at %r: %s\n" % (name, e))
                return 3
            time.sleep(0.05)

    def downstream():
        while True:
            try:
                data = sock.recv(BUF)
            except OSError:
                data = b""
            if not data:
                os._exit(0)
            view = memoryview(data)
            while view:
                n = os.write(1, view)
                view = view[n:]

    threading.Thread(target=downstream, name="attach-out", daemon=True).start()
    while True:
        data = os.read(0, BUF)
        if not data:
            break
        sock.sendall(data)
    os._exit(0)


def main(argv):
    if len(argv) >= 3 and argv[0] == "serve":
        rest = argv[2:]
        if rest and rest[0] == "--":
            rest = rest[1:]
        return serve(argv[1], rest)
    if len(argv) >= 2 and argv[0] == "attach":
        return attach(argv[1], float(argv[2]) if len(argv) > 2 else 60.0)
    sys.stderr.write("usage: relay.py serve NAME -- ARGV... | relay.py attach NAME [WAIT_S]\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
