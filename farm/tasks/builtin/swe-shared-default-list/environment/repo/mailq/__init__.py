from .message import Message
from .outbox import Outbox
from .render import render

__all__ = ["Message", "Outbox", "render"]
