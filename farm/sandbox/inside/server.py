"""The sandbox agent: one long-lived process per sandbox speaking JSON lines on stdin/stdout.

It runs *inside* the sandbox (a bubblewrap namespace or a pod), possibly under a Python that
is not farm's, so it must stay stdlib-only and Python >= 3.8. Every request runs in its own
thread; responses go out under a lock in completion order. Nothing but protocol lines is ever
written to the protocol stream: the real stdin/stdout are moved to private descriptors at
startup and fds 0/1 are pointed at /dev/null and stderr, so no child can corrupt the channel.

See /tmp/protocol.md (mirrored in farm/sandbox/channel.py) for the request and response shapes.
"""

import base64
import collections
import ctypes
import json
import os
import selectors
import signal
import stat
import sys
import threading
import time
import traceback
import uuid

REMEMBERED_RESPONSES = 1024
DEFAULT_OUTPUT_CAP = 1 << 20
MAX_READ_CHUNK = 8 << 20
TAG_VAR = "FARM_EXEC_ID"
PR_SET_CHILD_SUBREAPER = 36
KILL_ROUNDS = 200


class UnknownOpError(Exception):
    pass


def _log(msg):
    sys.stderr.write("farm-sandbox-agent: %s\n" % msg)
    sys.stderr.flush()


# --- process bookkeeping -------------------------------------------------------------------


def _proc_pids():
    for name in os.listdir("/proc"):
        if name.isdigit():
            yield int(name)


def _environ_tags(pid):
    """The FARM_EXEC_ID values in a process's initial environment (empty for zombies)."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            data = f.read()
    except OSError:
        return ()
    prefix = TAG_VAR.encode() + b"="
    return tuple(e[len(prefix):].decode("ascii", "replace") for e in data.split(b"\0") if e.startswith(prefix))


def _is_zombie(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
    except OSError:
        return True
    # the comm field may contain spaces and parentheses: the state follows the last ')'
    end = data.rindex(b")")
    return data[end + 2:end + 3] in (b"Z", b"X")


def _parent_pid(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


class Processes:
    """Starts commands, remembers direct children, reaps orphans re-parented to us."""

    def __init__(self):
        self.lock = threading.Lock()
        self.children = set()
        self.me = os.getpid()
        self.prefix = uuid.uuid4().hex[:12]
        self.counter = 0
        self._subreaper()
        t = threading.Thread(target=self._reap_loop, name="reaper", daemon=True)
        t.start()

    def _subreaper(self):
        # Orphans of our commands (double forks, nohup) re-parent to us rather than to the
        # namespace's init, so they stay findable and get reaped here.
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
                _log("prctl(PR_SET_CHILD_SUBREAPER) failed: errno %d" % ctypes.get_errno())
        except (OSError, AttributeError) as e:
            _log("no subreaper: %s" % e)

    def new_tag(self):
        with self.lock:
            self.counter += 1
            return "%s-%d" % (self.prefix, self.counter)

    def spawn(self, argv, **kwargs):
        import subprocess

        # Registration happens under the reaper's lock so that it never reaps a fresh child of
        # ours before Popen.wait() can collect its exit status.
        with self.lock:
            proc = subprocess.Popen(argv, **kwargs)
            self.children.add(proc.pid)
        return proc

    def forget(self, proc):
        with self.lock:
            self.children.discard(proc.pid)

    def reap_orphans(self):
        with self.lock:
            for pid in _proc_pids():
                if pid in self.children or pid == self.me:
                    continue
                if _parent_pid(pid) == self.me:
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        pass

    def _reap_loop(self):
        while True:
            time.sleep(0.5)
            try:
                self.reap_orphans()
            except Exception as e:  # never let the reaper die silently
                _log("reaper: %r" % e)

    def tagged(self, match):
        out = []
        for pid in _proc_pids():
            if pid == self.me:
                continue
            if any(match(t) for t in _environ_tags(pid)) and not _is_zombie(pid):
                out.append(pid)
        return out

    def kill_tagged(self, match, pgid=None):
        """SIGKILL the process group and every tagged process until no tagged one is left."""
        for _ in range(KILL_ROUNDS):
            if pgid is not None:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except OSError:
                    pass
            pids = self.tagged(match)
            if not pids:
                return True
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.005)
            self.reap_orphans()
        return False


# --- output capture ------------------------------------------------------------------------


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


def encode_response(payload):
    """One protocol line; a bytes ``data_b64`` in the result is spliced in unescaped (base64
    is JSON-safe, and json.dumps of megabytes of it costs as much as encoding it)."""
    result = payload.get("result")
    data = result.get("data_b64") if isinstance(result, dict) else None
    if not isinstance(data, bytes):
        return json.dumps(payload, separators=(",", ":")).encode("utf-8") + b"\n"
    rest = dict(payload, result={k: v for k, v in result.items() if k != "data_b64"})
    text = json.dumps(rest, separators=(",", ":")).encode("utf-8")
    # the result object is the last key: {"id":..,"ok":true,"result":{...}}
    assert text.endswith(b"}}")
    head = text[:-2]
    sep = b"" if head.endswith(b"{") else b","
    return b"".join((head, sep, b'"data_b64":"', data, b'"}}\n'))


# --- operations ----------------------------------------------------------------------------


class Agent:
    def __init__(self, out_file):
        self.out = out_file
        self.out_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.running = set()
        self.done = collections.OrderedDict()
        self.procs = Processes()
        self.stopping = False

    # protocol plumbing

    def send(self, payload):
        line = encode_response(payload)
        with self.out_lock:
            try:
                self.out.write(line)
                self.out.flush()
            except (BrokenPipeError, ValueError, OSError):
                # the client is gone: nothing left to answer to
                self.shutdown_now(1)

    def handle_line(self, line):
        try:
            req = json.loads(line)
            rid = req["id"]
            op = req["op"]
            args = req.get("args") or {}
            if not isinstance(rid, str) or not isinstance(op, str) or not isinstance(args, dict):
                raise ValueError("id and op must be strings and args an object")
        except (ValueError, KeyError, TypeError) as e:
            self.send({"id": None, "ok": False, "error": {"type": "ProtocolError", "message": "bad request line: %s" % e}})
            return
        with self.state_lock:
            if rid in self.done:
                remembered = self.done[rid]
                self.done.move_to_end(rid)
            elif rid in self.running:
                return  # attached: the running request answers once for both
            else:
                remembered = None
                self.running.add(rid)
        if remembered is not None:
            self.send(remembered)
            return
        t = threading.Thread(target=self.run_request, args=(rid, op, args), name="req-" + rid, daemon=True)
        t.start()

    def run_request(self, rid, op, args):
        try:
            fn = getattr(self, "op_" + op, None)
            if fn is None:
                raise UnknownOpError("unknown op %r" % op)
            resp = {"id": rid, "ok": True, "result": fn(**args)}
        except TypeError as e:
            resp = {"id": rid, "ok": False, "error": {"type": "TypeError", "message": "%s: %s" % (op, e)}}
        except Exception as e:
            expected = (OSError, ValueError, ModuleNotFoundError, UnknownOpError)
            if not isinstance(e, expected) and type(e).__module__ != "tarfile":
                _log("op %s failed:\n%s" % (op, traceback.format_exc()))
            resp = {"id": rid, "ok": False, "error": {"type": type(e).__name__, "message": str(e)}}
        with self.state_lock:
            self.running.discard(rid)
            self.done[rid] = resp
            while len(self.done) > REMEMBERED_RESPONSES:
                self.done.popitem(last=False)
        self.send(resp)
        if op == "shutdown" and resp["ok"]:
            self.shutdown_now(0)

    def shutdown_now(self, code):
        if self.stopping:
            return
        self.stopping = True
        prefix = self.procs.prefix + "-"
        self.procs.kill_tagged(lambda tag: tag.startswith(prefix))
        try:
            self.out.flush()
        except Exception:
            pass
        os._exit(code)

    # ops

    def op_ping(self):
        return {"pid": os.getpid(), "python": "%d.%d.%d" % sys.version_info[:3]}

    def op_shutdown(self):
        return {}

    def op_exec(self, command, timeout_s=120.0, cwd=None, env=None, merge_stderr=False, output_cap=DEFAULT_OUTPUT_CAP):
        return self.run_command(command, timeout_s, cwd, env, merge_stderr, output_cap)

    def run_command(self, command, timeout_s=120.0, cwd=None, env=None, merge_stderr=False, output_cap=DEFAULT_OUTPUT_CAP):
        import subprocess

        if output_cap is None:
            output_cap = DEFAULT_OUTPUT_CAP
        if cwd and not os.path.isdir(cwd):
            # like a shell whose `cd` failed: the command's problem, not the channel's
            msg = "farm: cannot run in %s: no such directory\n" % cwd
            return {"exit_code": 1, "stdout": "", "stderr": msg, "timed_out": False, "duration_s": 0.0,
                    "truncated": False, "output_bytes": len(msg)}
        tag = self.procs.new_tag()
        full_env = dict(os.environ)
        if env:
            full_env.update({str(k): str(v) for k, v in env.items()})
        full_env[TAG_VAR] = tag
        started = time.monotonic()
        deadline = started + float(timeout_s)
        proc = self.procs.spawn(
            ["/bin/bash", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            cwd=cwd or None,
            env=full_env,
            start_new_session=True,
            close_fds=True,
        )
        out = Capture(output_cap)
        err = Capture(output_cap)
        timed_out = False
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        if proc.stderr is not None:
            sel.register(proc.stderr, selectors.EVENT_READ, err)
        try:
            while sel.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                for key, _ in sel.select(min(remaining, 1.0)):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        key.data.feed(data)
                    else:
                        sel.unregister(key.fileobj)
            if not timed_out:
                try:
                    proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
            if timed_out:
                self.procs.kill_tagged(lambda t: t == tag, pgid=proc.pid)
                proc.wait()
                # take what the killed processes left in the pipes, without waiting for an
                # untagged straggler that may still hold them open
                for key in list(sel.get_map().values()):
                    os.set_blocking(key.fd, False)
                    try:
                        while True:
                            data = os.read(key.fd, 1 << 16)
                            if not data:
                                break
                            key.data.feed(data)
                    except (BlockingIOError, OSError):
                        pass
        finally:
            sel.close()
            for f in (proc.stdout, proc.stderr):
                if f is not None:
                    f.close()
            if proc.returncode is None:
                self.procs.kill_tagged(lambda t: t == tag, pgid=proc.pid)
                proc.wait()
            self.procs.forget(proc)
        code = proc.returncode
        if timed_out:
            code = 124
        elif code < 0:
            code = 128 - code
        return {
            "exit_code": code,
            "stdout": out.text(),
            "stderr": err.text(),
            "timed_out": timed_out,
            "duration_s": round(time.monotonic() - started, 6),
            "truncated": out.truncated or err.truncated,
            "output_bytes": out.total + err.total,
        }

    def op_read(self, path, offset=0, length=MAX_READ_CHUNK):
        length = max(0, min(int(length), MAX_READ_CHUNK))
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(int(offset))
            data = f.read(length)
        return {"data_b64": base64.b64encode(data), "size": size, "eof": int(offset) + len(data) >= size}

    def op_write(self, path, data_b64, append=False, mode=None, mkdirs=True):
        data = base64.b64decode(data_b64)
        if mkdirs:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
        with open(path, "ab" if append else "wb") as f:
            f.write(data)
            size = f.tell()
        if mode is not None:
            os.chmod(path, int(mode))
        return {"size": size}

    def op_stat(self, path):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return {"exists": False, "is_dir": False, "size": 0}
        return {"exists": True, "is_dir": stat.S_ISDIR(st.st_mode), "size": st.st_size}

    def op_list(self, path):
        entries = []
        with os.scandir(path) as it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                kind = "dir" if stat.S_ISDIR(st.st_mode) else "link" if stat.S_ISLNK(st.st_mode) else "file"
                entries.append({"name": e.name, "type": kind, "size": st.st_size})
        entries.sort(key=lambda x: x["name"])
        return {"entries": entries}

    def op_glob(self, pattern, cwd=None, limit=10000):
        import glob as globmod

        base = cwd or os.getcwd()
        full = pattern if os.path.isabs(pattern) else os.path.join(base, pattern)
        paths = []
        truncated = False
        for p in globmod.iglob(full, recursive=True):
            if len(paths) >= int(limit):
                truncated = True
                break
            paths.append(p)
        paths.sort()
        return {"paths": paths, "truncated": truncated}

    def op_untar(self, path, dest, remove=True):
        import tarfile

        os.makedirs(dest, exist_ok=True)
        files = 0
        try:
            with tarfile.open(path) as tar:
                members = tar.getmembers()
                files = sum(1 for m in members if m.isfile())
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(dest, filter="data")
                else:  # Python < 3.8.17 etc.: refuse what the data filter would refuse
                    for m in members:
                        name = os.path.normpath(m.name)
                        if name.startswith("/") or name == ".." or name.startswith("../") or m.isdev():
                            raise ValueError("unsafe tar member %r" % m.name)
                        if (m.issym() or m.islnk()) and (m.linkname.startswith("/") or ".." in m.linkname.split("/")):
                            raise ValueError("unsafe link %r -> %r" % (m.name, m.linkname))
                    tar.extractall(dest)
        finally:
            if remove:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        return {"files": files}

    def op_tool(self, name, args=None, workdir=None, limits=None):
        here = os.path.dirname(os.path.abspath(__file__))
        if here not in sys.path:
            sys.path.insert(0, here)
        import leaf_tools  # owned by the agent harness; shipped next to this file

        def exec_fn(command, timeout_s=120.0, cwd=None, env=None, merge_stderr=True, output_cap=DEFAULT_OUTPUT_CAP):
            return self.run_command(command, timeout_s, cwd, env, merge_stderr, output_cap)

        return leaf_tools.run_tool(name, args or {}, workdir, limits or {}, exec_fn)


def _private_stdio():
    """Move the protocol stream off fds 0/1 so children cannot read or write it."""
    in_fd = os.dup(0)
    out_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    for fd in (in_fd, out_fd):
        os.set_inheritable(fd, False)
    return os.fdopen(in_fd, "rb", buffering=1 << 16), os.fdopen(out_fd, "wb", buffering=1 << 16)


def main():
    inp, out = _private_stdio()
    sys.stdout = sys.stderr
    agent = Agent(out)
    while True:
        line = inp.readline()
        if not line:
            break
        if line.strip():
            agent.handle_line(line)
    # stdin closed: the client is gone, leave nothing running behind
    agent.shutdown_now(0)


if __name__ == "__main__":
    main()
