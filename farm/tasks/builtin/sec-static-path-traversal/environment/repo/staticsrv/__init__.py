from .files import NotFound, resolve
from .handler import Response, handle

__all__ = ["NotFound", "Response", "handle", "resolve"]
