from .db import connect
from .store import ORDERINGS, Note, NoteStore

__all__ = ["ORDERINGS", "Note", "NoteStore", "connect"]
