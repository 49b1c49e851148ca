import subprocess

from .errors import BackupError


def _run(command, cwd=None):
    try:
        return subprocess.run(command, shell=True, check=True, capture_output=True,
                              text=True, cwd=cwd).stdout
    except subprocess.CalledProcessError as exc:
        raise BackupError(exc.stderr.strip()) from None


def make_archive(dest, names, cwd):
    """Write the files ``names`` (relative to ``cwd``) into the .tar.gz ``dest``."""
    if not names:
        raise BackupError("nothing to archive")
    _run(f"tar -czf {dest} " + " ".join(names), cwd=cwd)
    return dest


def list_archive(dest):
    """Member names of the .tar.gz ``dest``."""
    return _run(f"tar -tzf {dest}").splitlines()
