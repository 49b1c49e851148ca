"""The sandbox agent: one long-lived process per sandbox speaking JSON lines on stdin/stdout.

It runs *inside* the sandbox (a bubblewrap namespace or a pod), possibly under a Python that
is not farm's, so it must stay stdlib-only and Python >= 3.8. Every request runs in its own
thread; responses go out under a lock in completion order. Nothing but protocol lines is ever
written to the protocol stream: the real stdin/stdout are moved to private descriptors at
startup and fds 0/1 are pointed at /dev/null and stderr, so no child can corrupt the channel.

See farm/sandbox/channel.py for the request and response shapes. The agent is the files of
this directory, shipped side by side: this one (the protocol and the file operations), procs.py
(commands: output capture, timeouts and killing all a command started), proctable.py (the
process table from /proc), jail.py (the PID namespace its commands run in), leaf_tools.py (the
five tools), leaf_vendor.py and leaf_bash.py (the vendor runner's tool rules; its Bash shell is
started by this process, with no runner process of its own). relay.py, shipped
with them, is not the agent: on the container backends it is PID 1 and keeps the agent alive.
"""

import base64
import collections
import json
import os
import stat
import sys
import threading
import traceback

# Run as a script (inside a sandbox, under -I) the directory of this file is not on sys.path;
# imported as farm.sandbox.inside.server (the host, tests) the package provides it.
if __package__:
    from . import contain, procs
else:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import contain
    import procs

REMEMBERED_RESPONSES = 1024
DEFAULT_OUTPUT_CAP = procs.DEFAULT_OUTPUT_CAP
MAX_READ_CHUNK = 8 << 20


class UnknownOpError(Exception):
    pass


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
    """The protocol dispatcher; ``reap`` as in procs.Processes (off for an agent inside a test)."""

    def __init__(self, out_file, reap=True):
        self.out = out_file
        self.out_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.running = set()
        self.done = collections.OrderedDict()
        self.procs = procs.Processes(reap=reap)
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
            error = {"type": "ProtocolError", "message": "bad request line: %s" % e}
            self.send({"id": None, "ok": False, "error": error})
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
        try:
            t.start()
        except RuntimeError:
            # "can't start new thread": the agent's commands hold every pid of the sandbox (a
            # fork storm). Answer here rather than die: the kill_leftovers that frees them, and
            # the patch capture after it, must still get through.
            self.run_request(rid, op, args)

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
                procs.log("op %s failed:\n%s" % (op, traceback.format_exc()))
            resp = {"id": rid, "ok": False, "error": {"type": type(e).__name__, "message": str(e)}}
        with self.state_lock:
            self.running.discard(rid)
            self.done[rid] = resp
            while len(self.done) > REMEMBERED_RESPONSES:
                self.done.popitem(last=False)
        self.send(resp)
        if op == "shutdown" and resp["ok"]:
            self.shutdown_now(0)

    def shutdown_now(self, code):  # pragma: no mutate block (ends the process: subprocess tests only)
        if self.stopping:
            return
        self.stopping = True
        self.procs.kill_everything()
        try:
            self.out.flush()
        except Exception:
            pass
        os._exit(code)

    # ops

    def op_ping(self):
        return {"pid": os.getpid(), "python": "%d.%d.%d" % sys.version_info[:3],
                "agent_isolation": self.procs.isolation}

    def op_shutdown(self):
        return {}

    def op_exec(self, command, timeout_s=120.0, cwd=None, env=None, merge_stderr=False, output_cap=DEFAULT_OUTPUT_CAP,
                private_verifier=False):
        return self.run_command(command, timeout_s, cwd, env, merge_stderr, output_cap, private_verifier)

    def run_command(self, command, timeout_s=120.0, cwd=None, env=None, merge_stderr=False,
                    output_cap=DEFAULT_OUTPUT_CAP, private_verifier=False, login=False):
        return procs.run_command(self.procs, command, timeout_s, cwd, env, merge_stderr, output_cap,
                                 private_verifier=private_verifier, login=login)

    def op_kill_leftovers(self):
        # before an in-place verifier (a daemon the agent left must not outlive its phase), and
        # when the patch capture found no pid to fork with (a fork storm of the agent's)
        clean, killed = self.procs.kill_all()
        return {"clean": clean, "killed": killed, "agent_isolation": self.procs.isolation}

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
        if __package__:
            from . import leaf_tools, leaf_vendor  # noqa: F401 (leaf_vendor registers the vendor's rules)
        else:
            import leaf_tools  # owned by the agent harness; shipped next to this file
            import leaf_vendor  # noqa: F401

        def exec_fn(command, timeout_s=120.0, cwd=None, env=None, merge_stderr=True, output_cap=DEFAULT_OUTPUT_CAP,
                    login=False):
            return self.run_command(command, timeout_s, cwd, env, merge_stderr, output_cap, login=login)

        # the vendor's Bash rules start their shell through this agent's own runner (leaf_bash.py)
        exec_fn.processes = self.procs
        return leaf_tools.run_tool(name, args or {}, workdir, limits or {}, exec_fn)


def _private_stdio():  # pragma: no mutate block (the agent's own process only)
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


def main():  # pragma: no mutate block (the agent's own process only)
    inp, out = _private_stdio()
    sys.stdout = sys.stderr
    agent = Agent(out)
    contain.pin_memory()
    agent.procs.start_jail()  # before any request thread exists or forks
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
