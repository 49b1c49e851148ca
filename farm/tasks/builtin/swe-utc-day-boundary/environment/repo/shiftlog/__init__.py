"""Hours worked per UTC day and per ISO week, from clock-in / clock-out records."""

from .report import daily_hours, weekly_hours
from .shifts import Shift
from .timeutil import parse_timestamp

__all__ = ["Shift", "daily_hours", "parse_timestamp", "weekly_hours"]
