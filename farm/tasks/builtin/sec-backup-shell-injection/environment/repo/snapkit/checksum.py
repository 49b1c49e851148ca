import subprocess

from .errors import BackupError


def checksum(path):
    """Hex SHA-256 of the file at ``path``."""
    try:
        proc = subprocess.run(f"sha256sum {path}", shell=True, check=True,
                              capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        raise BackupError(exc.stderr.strip()) from None
    return proc.stdout.split()[0]
