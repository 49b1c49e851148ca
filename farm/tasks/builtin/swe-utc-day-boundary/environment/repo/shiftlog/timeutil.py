from datetime import date, datetime, time, timedelta, timezone


def parse_timestamp(text):
    """Parse an ISO 8601 timestamp; a timestamp without an offset is taken to be UTC."""
    text = text.strip()
    if text[-1:] in ("z", "Z"):
        text = text[:-1] + "+00:00"
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not an ISO 8601 timestamp: {text!r}") from None
    if value.utcoffset() is None:
        value = value.replace(tzinfo=timezone.utc)
    return value


def day_of(moment):
    """The payroll day a moment belongs to."""
    return moment.date()


def next_midnight(moment):
    """The first payroll-day boundary strictly after ``moment``."""
    return datetime.combine(day_of(moment) + timedelta(days=1), time(), tzinfo=timezone.utc)


def iso_week(day: date):
    year, week, _ = day.isocalendar()
    return year, week
