#!/bin/bash
# Reference fix: argument vectors instead of shell strings, and "--" before file operands.
set -euo pipefail
cat > snapkit/checksum.py <<'PY'
import subprocess

from .errors import BackupError


def checksum(path):
    """Hex SHA-256 of the file at ``path``."""
    try:
        proc = subprocess.run(["sha256sum", "--", path], check=True,
                              capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        raise BackupError(exc.stderr.strip()) from None
    return proc.stdout.split()[0]
PY
cat > snapkit/archive.py <<'PY'
import subprocess

from .errors import BackupError


def _run(argv, cwd=None):
    try:
        return subprocess.run(argv, check=True, capture_output=True, text=True, cwd=cwd).stdout
    except subprocess.CalledProcessError as exc:
        raise BackupError(exc.stderr.strip()) from None


def make_archive(dest, names, cwd):
    """Write the files ``names`` (relative to ``cwd``) into the .tar.gz ``dest``."""
    if not names:
        raise BackupError("nothing to archive")
    # "--" keeps tar from reading a name that starts with "-" as an option.
    _run(["tar", "-czf", dest, "--", *names], cwd=cwd)
    return dest


def list_archive(dest):
    """Member names of the .tar.gz ``dest``."""
    return _run(["tar", "-tzf", dest]).splitlines()
PY
