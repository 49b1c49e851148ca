"""The in-place verifier's private mount namespace, out of reach of the agent's processes.

Part of the sandbox agent (see server.py): stdlib-only and Python >= 3.8, and a script of its
own (``verifier_ns.py CAPS CWD -- ARGV...``), started by the agent *outside* the jail (jail.py).

Processes the agent left behind keep running (many Terminal-Bench answers are servers the tests
query), so the verifier must be out of their reach rather than they killed. This program:

* unshares a mount namespace and makes every mount in it private, so nothing mounted here is
  seen by any other process (the agent's jail, or a later one);
* copies the uploaded ``/tests`` into a tmpfs mounted over ``/tests`` and mounts an empty tmpfs
  over ``/logs/verifier``: a daemon of the agent's that writes ``/logs/verifier/reward.txt``
  writes into the directory under the mount, which the verifier never reads;
* runs ``ARGV`` (the verifier's shell) with the jail's capabilities dropped, its stderr merged
  into stdout, in the sandbox agent's PID namespace (outside the agent's, so no agent process
  can see, trace or signal it), and
* once it exits, writes the regular files it left in ``/logs/verifier`` to its own stderr as one
  line ``FARM-VERIFIER-FILES <json>``: the agent reads the reward from that, never from a path an
  agent process can write.

It exits as ARGV did. Where no mount namespace can be made (no ``CAP_SYS_ADMIN``), it says so
in the result line (``private: false``) and runs ARGV anyway; the caller reports it.
"""

import base64
import ctypes
import json
import os
import sys

MARKER = "FARM-VERIFIER-FILES "
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
PRIVATE_PATHS = ("/tests", "/logs/verifier")
FILE_CAP = 8 << 20  # bytes kept per file of /logs/verifier (a SWE-bench test log can be large)
TOTAL_CAP = 24 << 20


def _errno_text():
    return os.strerror(ctypes.get_errno())


def _snapshot(root):
    """Every entry under ``root`` as (relative path, kind, mode, data); symlinks kept as links."""
    out = []
    for top, dirs, files in os.walk(root):
        rel = os.path.relpath(top, root)
        for name in sorted(dirs):
            path = os.path.join(top, name)
            if os.path.islink(path):
                out.append((os.path.join(rel, name), "link", 0, os.readlink(path)))
            else:
                out.append((os.path.join(rel, name), "dir", os.stat(path).st_mode & 0o7777, None))
        for name in sorted(files):
            path = os.path.join(top, name)
            if os.path.islink(path):
                out.append((os.path.join(rel, name), "link", 0, os.readlink(path)))
                continue
            with open(path, "rb") as f:
                out.append((os.path.join(rel, name), "file", os.stat(path).st_mode & 0o7777, f.read()))
    return out


def _restore(root, entries):
    for rel, kind, mode, data in entries:
        path = os.path.normpath(os.path.join(root, rel))
        if kind == "dir":
            os.makedirs(path, exist_ok=True)
            os.chmod(path, mode)
        elif kind == "link":
            os.symlink(data, path)
        else:
            with open(path, "wb") as f:
                f.write(data)
            os.chmod(path, mode)


def make_private(libc):  # pragma: no mutate block (its own process)
    """The namespace and its two tmpfs mounts; "" or why not (ValueError: a redirected path)."""
    for path in PRIVATE_PATHS:
        # the caller removed symlinks; one here was planted since: never follow it
        if os.path.realpath(path) != path or not os.path.isdir(path):
            raise ValueError("%s is not a plain directory (redirected while the verifier started)" % path)
    tests = _snapshot("/tests")
    if libc.unshare(CLONE_NEWNS) != 0:
        return "unshare(CLONE_NEWNS): " + _errno_text()
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return "making / private: " + _errno_text()
    for path in PRIVATE_PATHS:
        if libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755") != 0:
            return "tmpfs on %s: %s" % (path, _errno_text())
    _restore("/tests", tests)
    return ""


def collect(root="/logs/verifier"):
    """The regular files directly in ``root``, base64, each cut at FILE_CAP (the head kept)."""
    files, total = {}, 0
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return files
    for name in names:
        path = os.path.join(root, name)
        if os.path.islink(path) or not os.path.isfile(path) or total >= TOTAL_CAP:
            continue
        with open(path, "rb") as f:
            data = f.read(min(FILE_CAP, TOTAL_CAP - total))
        total += len(data)
        files[name] = base64.b64encode(data).decode("ascii")
    return files


def run(caps, cwd, argv):  # pragma: no mutate block (its own process)
    if __package__:
        from .jail import _libc, drop_capabilities
    else:  # a script under -I: its own directory is not on sys.path
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from jail import _libc, drop_capabilities

    libc = _libc()
    report = {"private": True, "why": ""}
    try:
        why = make_private(libc)
    except (OSError, ValueError) as e:
        # a redirected path (the agent's doing), or a set-up that broke half-way: never run
        # the verifier where its results could be anyone's
        report.update(private=False, failed=True, redirected=isinstance(e, ValueError), why=str(e))
        sys.stderr.write(MARKER + json.dumps(report) + "\n")
        return 125
    if why:
        report.update(private=False, why=why)
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(1, 2)
            os.chdir(cwd or "/")
            drop_capabilities(libc, caps)
            os.execvp(argv[0], argv)
        except OSError as e:
            os.write(1, ("farm: cannot run the verifier %s: %s\n" % (argv[0], e)).encode())
        os._exit(127)
    _, status = os.waitpid(pid, 0)
    code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    if report["private"]:
        report["files"] = collect()
    sys.stderr.write(MARKER + json.dumps(report) + "\n")
    sys.stderr.flush()
    return code


def parse(stderr):
    """(report or None, the stderr without the result line)."""
    kept, report = [], None
    for line in stderr.splitlines(True):
        if line.startswith(MARKER):
            try:
                report = json.loads(line[len(MARKER):])
            except ValueError:
                report = None
        else:
            kept.append(line)
    return report, "".join(kept)


def main(args):  # pragma: no mutate block (its own process)
    if "--" not in args or len(args) < 3:
        sys.stderr.write("usage: verifier_ns.py CAPS CWD -- ARGV...\n")
        return 2
    cut = args.index("--")
    caps = [int(c) for c in args[0].split(",") if c and c != "-"]
    return run(caps, args[1], args[cut + 1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
