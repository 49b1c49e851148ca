from .archive import list_archive, make_archive
from .checksum import checksum
from .errors import BackupError

__all__ = ["BackupError", "checksum", "list_archive", "make_archive"]
