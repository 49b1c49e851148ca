from collections import defaultdict

from .shifts import Shift
from .timeutil import day_of, iso_week


def _shifts(records):
    return [r if isinstance(r, Shift) else Shift.from_record(r) for r in records]


def daily_hours(records, worker=None):
    """Hours per payroll day, split at day boundaries; ``{date: hours}`` sorted by date."""
    totals = defaultdict(float)
    for shift in _shifts(records):
        if worker is not None and shift.worker != worker:
            continue
        for day, hours in shift.pieces():
            totals[day] += hours
    return {day: round(totals[day], 2) for day in sorted(totals)}


def weekly_hours(records):
    """Hours per worker per ISO week; a shift counts in the week of the day it starts."""
    totals = defaultdict(float)
    for shift in _shifts(records):
        totals[(shift.worker, iso_week(day_of(shift.start)))] += shift.hours
    return {key: round(totals[key], 2) for key in sorted(totals)}
