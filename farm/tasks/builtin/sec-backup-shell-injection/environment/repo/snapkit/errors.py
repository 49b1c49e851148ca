class BackupError(Exception):
    """A backup command failed; the message carries the tool's error output."""
