"""Where a verifier's interpreter, libraries and tools come from in a sandbox: the paths the
system-tamper check watches (farm/grade/tamper.py judges them; a pod lists their changes with
farm/sandbox/relayed/ctime_scan.py)."""

from __future__ import annotations

BIN_DIRS = ("/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin")
# pytest reads these on every ancestor of /tests up to its root directory: "/" is one
ROOT_TEST_CONFIG = frozenset({"/conftest.py", "/pytest.ini", "/pyproject.toml", "/tox.ini", "/setup.cfg"})
# the trees a pod's walk covers (a /lib -> usr/lib link is walked once, under /usr)
SYSTEM_ROOTS = ("/bin", "/sbin", "/usr", "/lib", "/lib64", "/opt", "/etc")
