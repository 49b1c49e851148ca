from dataclasses import dataclass
from datetime import datetime

from .timeutil import day_of, next_midnight, parse_timestamp


@dataclass(frozen=True)
class Shift:
    worker: str
    start: datetime
    end: datetime

    def __post_init__(self):
        if self.end <= self.start:
            raise ValueError(f"shift of {self.worker} ends before it starts: {self.start} .. {self.end}")

    @classmethod
    def from_record(cls, record):
        """Build a shift from ``{"worker": ..., "in": "<iso>", "out": "<iso>"}``."""
        try:
            return cls(record["worker"], parse_timestamp(record["in"]), parse_timestamp(record["out"]))
        except KeyError as exc:
            raise ValueError(f"record is missing field {exc.args[0]!r}: {record!r}") from None

    @property
    def hours(self):
        return (self.end - self.start).total_seconds() / 3600

    def pieces(self):
        """Split the shift at payroll-day boundaries: yields (day, hours) pairs."""
        cursor = self.start
        while cursor < self.end:
            boundary = min(self.end, next_midnight(cursor))
            yield day_of(cursor), (boundary - cursor).total_seconds() / 3600
            cursor = boundary
