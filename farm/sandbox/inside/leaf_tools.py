"""The five Leaf-compatible tools, executed inside the sandbox by the sandbox agent's `tool` op.

Stdlib only and Python >= 3.8: this file is shipped into task images whose Python is not
farm's. ``run_tool`` never raises for anything a model can send: every problem becomes the
observation text ``"<ExceptionType>: <message>"``, as in the vendor's tool runner. The sandbox
agent serves requests on threads, so nothing here may ``chdir``: paths are resolved against
the workdir explicitly.

Semantics follow the Leaf harness behaviour by behaviour (see docs/agent.md); the places where
farm deliberately differs are marked "farm:". ``limits["compat"]`` picks between them where the
vendor's runner does something farm would not (agent.compat): ``leaf-2609`` / ``leaf-legacy``
behave as the vendor's runner under its newest (umask 077) / older (umask 022) transport, as
the differential suite checks against recorded vectors (tests/agent/test_leaf_differential.py);
``farm-safe`` keeps farm's own rules. The bounds that keep the sandbox agent alive (Read's scan
limit and refusal of devices, Glob's child process, the output capture cap) hold in every
setting.
"""

import os
import re
import select
import stat
import subprocess
import sys
import time

TOOL_NAMES = ("Read", "Write", "Edit", "Glob", "Bash")

DEFAULT_LIMITS = {
    "read_output_chars": 20000,
    "bash_output_chars": 30000,
    "glob_limit": 1000,
    "glob_timeout_s": 15.0,  # farm: a Glob that has not finished by then returns what it found
    "bash_timeout_s": 120.0,
    "truncation": "head",  # head (Leaf) | head_tail
    "max_timeout_s": None,  # farm: the remaining agent budget caps a Bash timeout
    "env": None,  # extra environment for Bash (e.g. the task image's ENV), set by the sandbox
    "compat": "farm-safe",  # the agent always sends agent.compat (leaf-2609 unless configured)
}
# agent.compat settings that behave as the vendor's runner (leaf_vendor.py), and the umask of
# their transport
VENDOR_UMASK = {"leaf-2609": 0o077, "leaf-legacy": 0o022}
COMPAT = ("leaf-2609", "leaf-legacy", "farm-safe")
MIN_BASH_TIMEOUT_S = 0.1
TRUTHY = ("1", "true", "yes", "on")
# farm: Leaf reads a whole file and globs without a bound. A Read of /dev/zero (or a FIFO, or a
# huge sparse file) then exhausts or blocks the sandbox agent, and a Glob of `/**` follows the
# symlink loops under /proc for the trial's whole budget: the model's mistake would end as an
# infrastructure error. Reads stop after READ_SCAN_BYTES; a Glob runs in a child process that
# is killed after limits["glob_timeout_s"] or GLOB_MAX_BYTES of paths.
READ_SCAN_BYTES = 10 << 20
GLOB_MAX_BYTES = 8 << 20
# a device never ends (or blocks); a named pipe is allowed (it ends when its writer does)
_FILE_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class ToolInputError(ValueError):
    """Shown to the model as ``ValueError: ...`` (the class name is rendered as ValueError)."""


def truncate(text, limit, mode="head", total=None):
    """Cut ``text`` to ``limit`` characters plus a marker naming how many were dropped.

    ``total`` is the full length when part of the text was already dropped upstream.
    """
    if limit is None or limit <= 0 or len(text) <= limit:
        return text, False
    dropped = (total if total is not None else len(text)) - limit
    if mode == "head_tail":
        head = limit // 2
        tail = limit - head
        return "%s\n[truncated %d chars]\n%s" % (text[:head], dropped, text[len(text) - tail:]), True
    return "%s\n[truncated %d chars]" % (text[:limit], dropped), True


def resolve(path, workdir):
    path = os.path.expanduser(str(path))
    if not os.path.isabs(path):
        path = os.path.join(workdir, path)
    return os.path.normpath(path)


def display(path, workdir):
    """Relative to the workdir when inside it, absolute otherwise."""
    if path == workdir:
        return "."
    prefix = workdir.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else path


def _file_path(args):
    value = args.get("file_path")
    if value is None or value == "":
        value = args.get("path")
    if value is None or value == "":
        raise ToolInputError("file_path is required")
    return value


def _int_arg(args, key, default):
    value = args.get(key)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise ToolInputError("%s must be an integer, got %r" % (key, value))
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ToolInputError("%s must be an integer, got %r" % (key, value)) from None


def _own_channel(st):
    """True when ``st`` is one of the sandbox agent's stdio (its request channel): reading it
    (``/proc/self/fd/0``) would steal the harness's bytes and take the agent down."""
    for fd in (0, 1, 2):
        try:
            own = os.fstat(fd)
        except OSError:
            continue
        if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
            return True
    return False


def _open_regular(path, workdir):
    """Open ``path`` for reading, refusing devices and the sandbox agent's own channel."""
    st = os.stat(path)
    for test, kind in _FILE_KINDS:
        if test(st.st_mode):
            raise ToolInputError("%s is %s, not a regular file" % (display(path, workdir), kind))
    if not stat.S_ISDIR(st.st_mode) and _own_channel(st):
        raise ToolInputError("%s is the sandbox agent's own channel" % display(path, workdir))
    return open(path, "rb")


def _read_text(path, workdir, whole=False):
    """The file's text and how many bytes of it were left unread (beyond READ_SCAN_BYTES).

    ``whole``: the caller rewrites the file (Edit), so a part is no use: a file larger than
    the bound is refused instead.
    """
    # farm: surrogateescape keeps undecodable bytes, so an Edit never rewrites them lossily;
    # the model still sees them as U+FFFD (see _visible).
    with _open_regular(path, workdir) as f:
        data = f.read(READ_SCAN_BYTES + 1)
        size = os.fstat(f.fileno()).st_size
    left = 0
    if len(data) > READ_SCAN_BYTES:
        if whole:
            raise ToolInputError("%s is larger than %d bytes; edit it with Bash" % (display(path, workdir),
                                                                                 READ_SCAN_BYTES))
        data = data[:READ_SCAN_BYTES]
        left = max(size - READ_SCAN_BYTES, 1)  # procfs files report size 0: at least one more byte
    return data.decode("utf-8", "surrogateescape"), left


_SURROGATE = re.compile("[\ud800-\udfff]")
_NOT_ESCAPED_BYTE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def _visible(text):
    """``text`` with U+FFFD for every byte that is not UTF-8 (a file's, a file name's).

    The OS gives such bytes back as lone surrogates (surrogateescape), which no JSON or Parquet
    writer downstream accepts as UTF-8; the vendor's transport decodes the tool runner's output
    as UTF-8 with replacement, so the model sees U+FFFD there too."""
    if not _SURROGATE.search(text):
        return text
    text = _NOT_ESCAPED_BYTE.sub("\ufffd", text)  # a lone surrogate that stands for no byte
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def tool_read(args, workdir, limits):
    path = resolve(_file_path(args), workdir)
    offset = max(_int_arg(args, "offset", 1), 1)
    limit = _int_arg(args, "limit", 0)
    text, left = _read_text(path, workdir)
    lines = _visible(text).splitlines()
    if left and lines and not text.endswith(("\n", "\r")):
        lines.pop()  # the last line was cut by the bound: do not show half of it as a whole line
    end = len(lines) if limit <= 0 else min(len(lines), offset - 1 + limit)
    out = [display(path, workdir)]
    for n in range(offset, end + 1):
        out.append("%d. %s" % (n, lines[n - 1]))
    if left:
        out.append("[farm: Read stops after the first %d bytes; %d more bytes were not read]"
                   % (READ_SCAN_BYTES, left))
    return "\n".join(out), limits["read_output_chars"]


def tool_write(args, workdir, limits):
    path = resolve(_file_path(args), workdir)
    content = args.get("content")
    if content is None:
        raise ToolInputError("content is required")
    if not isinstance(content, str):
        content = str(content)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(content)
    return "Wrote %s (%d bytes)." % (display(path, workdir), len(content)), None


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in TRUTHY
    return bool(value)


def tool_edit(args, workdir, limits):
    path = resolve(_file_path(args), workdir)
    old = args.get("old_string")
    new = args.get("new_string")
    if old is None or old == "":
        raise ToolInputError("old_string must be non-empty")
    if new is None:
        raise ToolInputError("new_string is required")
    old, new = str(old), str(new)
    text, _ = _read_text(path, workdir, whole=True)
    count = text.count(old)
    if count == 0:
        raise ToolInputError("old_string was not found")
    replace_all = _truthy(args.get("replace_all", False))
    if count > 1 and not replace_all:
        raise ToolInputError(
            "old_string matched %d times; set replace_all=true or use a more specific old_string" % count
        )
    done = count if replace_all else 1
    text = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text)
    return "Edited %s (%d replacement%s)." % (display(path, workdir), done, "" if done == 1 else "s"), None


def tool_glob(args, workdir, limits):
    pattern = args.get("pattern")
    if pattern is None or pattern == "":
        raise ToolInputError("pattern is required")
    root = resolve(args.get("path") or ".", workdir)
    matches, stopped = _bounded_glob(os.path.join(root, str(pattern)), float(limits["glob_timeout_s"]))
    shown = sorted(display(os.path.normpath(m), workdir) for m in matches)
    note = ("\n[farm: Glob stopped after %s; the list is incomplete, narrow the pattern or the path]" % stopped
            if stopped else "")
    if not shown:
        return "No files matched." + note, None
    cap = int(limits["glob_limit"])
    out = "\n".join(shown[:cap])
    if len(shown) > cap:
        out += "\n... %d more files" % (len(shown) - cap)
    return out + note, None


# the child's whole program: Python's own recursive glob, regular files only, NUL-separated
_GLOB_CHILD = ("import glob, os, sys\n"
               "for m in glob.iglob(sys.argv[1], recursive=True):\n"
               "    if os.path.isfile(m):\n"
               "        sys.stdout.buffer.write(os.fsencode(m) + b'\\0')\n")


def _bounded_glob(pattern, timeout_s):
    """Python's ``glob.glob(pattern, recursive=True)`` (files only), in a child process killed
    after ``timeout_s`` or GLOB_MAX_BYTES of output; (paths, why it stopped or "")."""
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _GLOB_CHILD, pattern], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    chunks, size, stopped = [], 0, ""
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                stopped = "%g s" % timeout_s
                break
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > GLOB_MAX_BYTES:
                stopped = "%d bytes of paths" % GLOB_MAX_BYTES
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
    data = b"".join(chunks)[:GLOB_MAX_BYTES]
    if stopped:
        data = data[:data.rfind(b"\0") + 1]  # a path cut by the bound is not a path
    return [os.fsdecode(p) for p in data.split(b"\0") if p], stopped


def bash_timeout(args, default_s, max_s=None):
    """Leaf's rule: timeout_ms wins; a timeout above 1000 is taken as milliseconds."""
    raw_ms = args.get("timeout_ms")
    raw = args.get("timeout")
    try:
        if raw_ms is not None and raw_ms != "" and not isinstance(raw_ms, bool):
            seconds = float(raw_ms) / 1000.0
        elif raw is not None and raw != "" and not isinstance(raw, bool):
            seconds = float(raw)
            if seconds > 1000:
                seconds /= 1000.0
        else:
            seconds = float(default_s)
    except (TypeError, ValueError):
        shown = raw_ms if raw_ms is not None else raw
        raise ToolInputError("timeout must be a number of seconds, got %r" % shown) from None
    if seconds != seconds:  # NaN
        raise ToolInputError("timeout must be a number of seconds, got %r" % raw)
    seconds = max(seconds, MIN_BASH_TIMEOUT_S)
    if max_s is not None:
        seconds = min(seconds, max(float(max_s), MIN_BASH_TIMEOUT_S))
    return seconds


def tool_bash(args, workdir, limits, exec_fn, extra):
    command = args.get("command")
    if command is None or command == "":
        raise ToolInputError("command is required")
    timeout_s = bash_timeout(args, limits["bash_timeout_s"], limits.get("max_timeout_s"))
    cap_chars = int(limits["bash_output_chars"])
    # Enough bytes per stream that the capture never cuts inside what the character cap keeps.
    output_cap = max(8 * cap_chars + 4096, 65536)
    # a login shell (profiles put toolchains on PATH), started as such: not a shell that execs one
    res = exec_fn(str(command), timeout_s=timeout_s, cwd=workdir, env=limits.get("env") or None, merge_stderr=False,
                  output_cap=output_cap, login=True)
    out, err = res.get("stdout", ""), res.get("stderr", "")
    extra["exit_code"] = res.get("exit_code")
    extra["timed_out"] = bool(res.get("timed_out"))
    extra["command_s"] = res.get("duration_s")
    if res.get("timed_out"):
        head = "Timed out after %.1fs" % timeout_s
    else:
        head = "Exit code: %s" % res.get("exit_code")
    text = "%s\nSTDOUT:\n%s\nSTDERR:\n%s" % (head, out, err)
    if res.get("truncated"):
        # Bytes the capture already dropped still count towards "[truncated N chars]".
        extra["uncaptured"] = max(0, int(res.get("output_bytes") or 0) - len(out.encode()) - len(err.encode()))
    return text, cap_chars


TOOLS = {"Read": tool_read, "Write": tool_write, "Edit": tool_edit, "Glob": tool_glob}


# the vendor's rules (agent.compat leaf-*): leaf_vendor.py fills this when the sandbox agent
# imports it; {"Read": fn, ..., "Bash": fn}
VENDOR_TOOLS = {}


def run_tool(name, args, workdir, limits, exec_fn):
    """Run one tool call; returns {"observation": str, ...} and never raises for model input."""
    lim = dict(DEFAULT_LIMITS)
    lim.update({k: v for k, v in (limits or {}).items() if v is not None})
    if not isinstance(args, dict):
        args = {}
    workdir = os.path.normpath(workdir or "/")
    started = time.monotonic()
    extra = {}
    cap = None
    error = None
    vendor = lim["compat"] in VENDOR_UMASK
    try:
        if lim["compat"] not in COMPAT:
            raise ToolInputError("agent.compat must be one of %s, got %r" % (", ".join(COMPAT), lim["compat"]))
        if vendor and not VENDOR_TOOLS:
            raise RuntimeError("farm: leaf_vendor.py was not loaded next to leaf_tools.py")
        if name == "Bash":
            text, cap = (VENDOR_TOOLS["Bash"] if vendor else tool_bash)(args, workdir, lim, exec_fn, extra)
        elif name in TOOLS:
            text, cap = (VENDOR_TOOLS if vendor else TOOLS)[name](args, workdir, lim)
        else:
            text = "Unknown tool: %s" % name
            error = "UnknownTool"
    except Exception as exc:  # noqa: BLE001 - every tool failure is an observation
        error = "ValueError" if isinstance(exc, ToolInputError) else type(exc).__name__
        text = "%s: %s" % (error, exc)
    text = _visible(text)  # file names (Glob, display paths, errors) may hold non-UTF-8 bytes
    truncated = False
    if cap is not None:
        total = len(text) + extra.pop("uncaptured", 0)
        text, truncated = truncate(text, int(cap), lim["truncation"], total)
    result = {
        "observation": text,
        "output_chars": len(text),
        "truncated": truncated,
        "error": error,
        "duration_s": time.monotonic() - started,
    }
    result.update(extra)
    return result

