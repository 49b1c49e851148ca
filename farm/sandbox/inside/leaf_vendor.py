"""The vendor's tool rules, for agent.compat leaf-2609 / leaf-legacy (see leaf_tools.py).

Written from the vendor runner's observable behaviour (docs/agent.md, "Tool rules:
``agent.compat``", and the vectors the differential suite recorded from it), never from its
code: paths are used as given (``..`` is not resolved first) and shown after resolving
symlinks; arguments are coerced as Python's ``str()`` / ``int()`` / ``float()`` coerce them,
with their error text; files and directories are created under the transport's umask; Bash
output decodes strictly and with universal newlines, and a timed-out Bash call kills its shell
alone (leaf_bash.py, in the sandbox agent's own process: a Bash call starts the shell only).
Importing this module registers the rules with leaf_tools. Stdlib only, Python >= 3.8.
"""

import os
import stat

if __package__:
    from . import leaf_bash as lb
    from . import leaf_tools as lt
else:  # run as a script inside a sandbox: server.py put this directory on sys.path
    import leaf_bash as lb
    import leaf_tools as lt

ToolInputError = lt.ToolInputError
VENDOR_UMASK = lt.VENDOR_UMASK
READ_SCAN_BYTES = lt.READ_SCAN_BYTES


def _pure(path):
    """A path spelled as the vendor's pathlib spells it: no empty or "." parts, no trailing
    slash; ".." is kept (not resolved before use)."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return ("/" if path.startswith("/") else "") + "/".join(parts) or "."


def v_resolve(value, workdir):
    path = os.path.expanduser(str(value))
    return _pure(path if path.startswith("/") else workdir + "/" + path)


def v_display(path, workdir):
    """Relative to the workdir after resolving symlinks and "..", else the path as given."""
    real, root = os.path.realpath(path), os.path.realpath(workdir)
    if real == root:
        return "."
    prefix = root.rstrip("/") + "/"
    return real[len(prefix):] if real.startswith(prefix) else path


def _v_path(args, key="file_path"):
    value = args.get(key) or args.get("path")  # any falsy value falls back to `path`
    if not value:
        raise ToolInputError("%s is required" % key)
    return value


def _v_int(value, default):
    if value is None or (isinstance(value, str) and value == ""):
        return default
    return int(value)  # bool, float, "3" as Python's int(); its error text otherwise


def _v_truthy(value):
    if isinstance(value, bool):
        return value
    return str(value or "").strip().lower() in lt.TRUTHY


def _newlines(text):
    """Universal newlines, as the vendor's text-mode reads and Bash pipes give them."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _null_device(path):
    """True for the null device (char 1:3): the vendor reads it as the empty file it is; every
    other device stays refused (Read's bound holds in every setting)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)


def _v_read_text(path, workdir, whole=False):
    if _null_device(path):
        return "", 0
    return lt._read_text(path, workdir, whole)


def _v_read(args, workdir, limits):
    path = v_resolve(_v_path(args), workdir)
    text, left = _v_read_text(path, workdir)  # read before the offset is parsed, as the vendor
    lines = _newlines(lt._visible(text)).splitlines()
    if left and lines and not text.endswith(("\n", "\r")):
        lines.pop()
    offset = max(1, _v_int(args.get("offset"), 1))
    limit = _v_int(args.get("limit"), 0)
    end = len(lines) if limit <= 0 else min(len(lines), offset - 1 + limit)
    body = "\n".join("%d. %s" % (n, lines[n - 1]) for n in range(offset, end + 1))
    out = "%s\n%s" % (v_display(path, workdir), body)  # an empty selection leaves "path\n"
    if left:
        out += "\n[farm: Read stops after the first %d bytes; %d more bytes were not read]" % (READ_SCAN_BYTES, left)
    return out, limits["read_output_chars"]


def _v_mkdirs(path, mode):
    """Make ``path`` and missing parents with ``mode``, as pathlib's mkdir(parents=True,
    exist_ok=True) walks them ("nosuchdir/.." exists once nosuchdir does)."""
    try:
        os.mkdir(path)
    except FileNotFoundError:
        head = os.path.dirname(path)
        if not head or head == path:
            raise
        _v_mkdirs(head, mode)
        try:
            os.mkdir(path)
        except FileExistsError:
            if not os.path.isdir(path):
                raise
            return
    except FileExistsError:
        if not os.path.isdir(path):
            raise
        return
    os.chmod(path, mode)


def _v_write_text(path, text, mask):
    existed = os.path.exists(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    if not existed:  # a new file gets the transport's umask; an existing one keeps its mode
        os.chmod(path, 0o666 & ~mask)


def _v_write(args, workdir, limits):
    path = v_resolve(_v_path(args), workdir)
    content = str(args.get("content", ""))  # missing: an empty file; null: the text "None"
    mask = VENDOR_UMASK[limits["compat"]]
    _v_mkdirs(os.path.dirname(path), 0o777 & ~mask)
    _v_write_text(path, content, mask)
    return "Wrote %s (%d bytes)." % (v_display(path, workdir), len(content)), None


def _v_edit(args, workdir, limits):
    path = v_resolve(_v_path(args), workdir)
    old = str(args.get("old_string") or "")
    new = str(args.get("new_string") or "")  # missing or null: the matched text is deleted
    if not old:
        raise ToolInputError("old_string must be non-empty")
    text, _ = _v_read_text(path, workdir, whole=True)
    text = _newlines(lt._visible(text))  # the vendor rewrites the file as it read it: U+FFFD, \n
    count = text.count(old)
    replace_all = _v_truthy(args.get("replace_all"))
    if count == 0:
        raise ToolInputError("old_string was not found")
    if count > 1 and not replace_all:
        raise ToolInputError(
            "old_string matched %d times; set replace_all=true or use a more specific old_string" % count
        )
    _v_write_text(path, text.replace(old, new) if replace_all else text.replace(old, new, 1),
                  VENDOR_UMASK[limits["compat"]])
    done = count if replace_all else 1
    return "Edited %s (%d replacement%s)." % (v_display(path, workdir), done, "" if done == 1 else "s"), None


def _v_glob(args, workdir, limits):
    pattern = str(args.get("pattern") or "")
    if not pattern:
        raise ToolInputError("pattern is required")
    root = v_resolve(args.get("path") or ".", workdir)
    full = _pure(pattern if pattern.startswith("/") else root + "/" + pattern)  # "**/" becomes "**"
    matches, stopped = lt._bounded_glob(full, float(limits["glob_timeout_s"]))
    shown = sorted(v_display(_pure(m), workdir) for m in matches)  # a symlink shows as its target
    note = ("\n[farm: Glob stopped after %s; the list is incomplete, narrow the pattern or the path]" % stopped
            if stopped else "")
    if not shown:
        return "No files matched." + note, None
    cap = max(1, int(limits["glob_limit"]))
    out = "\n".join(shown[:cap])
    if len(shown) > cap:
        out += "\n... %d more files" % (len(shown) - cap)
    return out + note, None


def v_bash_timeout(args, default_s, max_s=None):
    """The vendor runner's rule; Python's own float() error for what it cannot parse."""
    if args.get("timeout_ms") is not None:
        seconds = max(0.1, float(args["timeout_ms"]) / 1000.0)
    elif args.get("timeout") is None:
        seconds = float(default_s)
    else:
        value = float(args["timeout"])
        seconds = max(0.1, value / 1000.0 if value > 1000 else value)  # NaN gives 0.1
    if max_s is not None:
        seconds = min(seconds, max(float(max_s), lt.MIN_BASH_TIMEOUT_S))
    return seconds


def _strict(data, total):
    """``data`` decoded as the vendor's text-mode pipe does: a UnicodeDecodeError for bytes
    that are not UTF-8 (the vendor's observation is then that error alone)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if total > len(data) and exc.reason == "unexpected end of data":
            return data[:exc.start].decode("utf-8")  # a character cut by the capture bound
        raise


def _v_bash(args, workdir, limits, exec_fn, extra):
    command = str(args.get("command") or "")
    if not command:
        raise ToolInputError("command is required")
    timeout_s = v_bash_timeout(args, limits["bash_timeout_s"], limits.get("max_timeout_s"))
    cap_chars = int(limits["bash_output_chars"])
    keep = max(4 * cap_chars + 4096, 65536)
    env = limits.get("env") or None
    own = [k for k in (env or {}) if str(k).startswith("FARM_")]  # the task's own names stay
    processes = getattr(exec_fn, "processes", None)
    if processes is None:
        raise RuntimeError("farm: this sandbox agent has no command runner for the vendor's Bash rules")
    res = lb.run_shell(processes, command, timeout_s, keep, VENDOR_UMASK[limits["compat"]], workdir, env, own)
    if res.get("runner_failed"):
        raise RuntimeError("farm: the Bash runner failed (exit %s): %s" % (res["exit_code"], res["stderr"][-2000:]))
    timed_out, code = res["timed_out"], res["returncode"]
    out, err, out_total, err_total = res["stdout"], res["stderr"], res["stdout_total"], res["stderr_total"]
    extra["exit_code"] = code
    extra["timed_out"] = bool(timed_out)
    extra["command_s"] = res["duration_s"]
    if timed_out:  # what was read before the deadline, with replacement and newlines as they came
        text = "Timed out after %.1fs\nSTDOUT:\n%s\nSTDERR:\n%s" % (
            timeout_s, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
    else:
        text = "Exit code: %d\nSTDOUT:\n%s\nSTDERR:\n%s" % (
            code, _newlines(_strict(out, out_total)), _newlines(_strict(err, err_total)))
    dropped = out_total - len(out) + err_total - len(err)
    if dropped:
        extra["uncaptured"] = dropped
    return text, cap_chars


lt.VENDOR_TOOLS.update({"Read": _v_read, "Write": _v_write, "Edit": _v_edit, "Glob": _v_glob, "Bash": _v_bash})
