"""What changed in a pod's system paths since it started, for the system-tamper check.

A container engine can diff a container against its image (``podman diff``); a Kubernetes pod
has no such call, and restricted Pod Security leaves root in the pod free to replace
``/usr/bin/python3`` or drop a ``.pth`` into site-packages. What the pod cannot do is set an
inode's change time (ctime) backwards: the kernel stamps it on every write, rename, chmod or
link, and moving the clock needs ``CAP_SYS_TIME``, which no restricted pod has. So at the end of
the start (after the task's build steps were replayed, before the agent's first step) the
sandbox records the pod's clock and which names its ``bin`` directories hold; before in-place
grading it lists every path under the system roots whose ctime is later. Names that were not in
a ``bin`` directory at the start count as added (``A``), everything else as changed (``C``) —
the ``(kind, path)`` pairs :func:`farm.grade.tamper.system_tamper` reads from ``podman diff``.

Both steps run farm's own Python in the pod (``manifests.PYTHON``), so images without GNU find
(busybox) are covered. What this cannot see: a change an agent hid by replacing farm's own files
in the pod (it is root there), and deletions (ctime of a removed inode is gone with it; a deleted
file is no trojan). docs/integrity.md says what each backend enforces and what it only flags.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Sequence

from farm.grade.tamper import BIN_DIRS, ROOT_TEST_CONFIG

# where a verifier's interpreter, libraries and tools come from
ROOTS = ("/bin", "/sbin", "/usr", "/lib", "/lib64", "/opt", "/etc")

# The clock is read, then 20 ms pass before the command returns: file times come from the
# kernel's coarse clock (one tick, at most 10 ms behind), so any change after this returns is
# stamped later than the recorded instant.
_BASELINE = """
import json, os, sys, time
t = time.time_ns()
names = {}
for d in json.loads(sys.argv[1]):
    try:
        names[d] = sorted(os.listdir(d))
    except OSError:
        pass
time.sleep(0.02)
print(json.dumps({"t": t, "bins": names}))
"""

# One line per path whose ctime is later than argv[1]: the roots are walked without following
# links (a /lib -> usr/lib link is walked once, under /usr), unreadable entries are skipped.
_CHANGED = """
import json, os, sys
since = int(sys.argv[1])
roots, files = json.loads(sys.argv[2]), json.loads(sys.argv[3])
def newer(p):
    try:
        return os.lstat(p).st_ctime_ns > since
    except OSError:
        return False
out = [f for f in files if newer(f)]
for root in roots:
    if os.path.islink(root) or not os.path.isdir(root):
        continue
    if newer(root):
        out.append(root)
    for top, dirs, names in os.walk(root):
        out.extend(p for p in (os.path.join(top, n) for n in dirs + names) if newer(p))
print(json.dumps(out))
"""


def baseline_command(python: str, bins: Sequence[str] = BIN_DIRS) -> str:
    """The shell command that prints ``{"t": <ns>, "bins": {dir: [names]}}`` at the start."""
    return " ".join([shlex.quote(python), "-I", "-S", "-c", shlex.quote(_BASELINE),
                     shlex.quote(json.dumps(list(bins)))])


def changed_command(python: str, since_ns: int, roots: Sequence[str] = ROOTS,
                    files: Iterable[str] = ROOT_TEST_CONFIG) -> str:
    """The shell command that prints the JSON list of paths under ``roots`` (and of ``files``)
    changed after ``since_ns``."""
    return " ".join([shlex.quote(python), "-I", "-S", "-c", shlex.quote(_CHANGED), str(int(since_ns)),
                     shlex.quote(json.dumps(list(roots))), shlex.quote(json.dumps(sorted(files)))])


def classify(paths: list[str], bins_at_start: dict[str, list[str]]) -> list[tuple[str, str]]:
    """``(kind, path)`` as ``podman diff`` would give it: ``A`` for a name a ``bin`` directory did
    not hold at the start, ``C`` otherwise (outside the ``bin`` directories the two are read alike)."""
    known = {d: set(names) for d, names in bins_at_start.items()}
    out = []
    for path in paths:
        parent, _, name = path.rpartition("/")
        added = parent in known and name not in known[parent]
        out.append(("A" if added else "C", path))
    return out
