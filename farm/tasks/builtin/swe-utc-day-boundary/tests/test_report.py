import unittest
from datetime import date

from shiftlog import Shift, daily_hours, parse_timestamp, weekly_hours


class DailyHoursTest(unittest.TestCase):
    def test_utc_shift_within_a_day(self):
        records = [{"worker": "ana", "in": "2024-03-04T08:00:00Z", "out": "2024-03-04T16:30:00Z"}]
        self.assertEqual(daily_hours(records), {date(2024, 3, 4): 8.5})

    def test_utc_shift_across_midnight(self):
        records = [{"worker": "ana", "in": "2024-03-04T22:00:00Z", "out": "2024-03-05T06:00:00Z"}]
        self.assertEqual(daily_hours(records), {date(2024, 3, 4): 2.0, date(2024, 3, 5): 6.0})

    def test_naive_timestamps_are_utc(self):
        records = [{"worker": "ana", "in": "2024-03-04T23:00:00", "out": "2024-03-05T01:00:00"}]
        self.assertEqual(daily_hours(records), {date(2024, 3, 4): 1.0, date(2024, 3, 5): 1.0})

    def test_filter_by_worker(self):
        records = [
            {"worker": "ana", "in": "2024-03-04T08:00:00Z", "out": "2024-03-04T12:00:00Z"},
            {"worker": "bo", "in": "2024-03-04T08:00:00Z", "out": "2024-03-04T09:00:00Z"},
        ]
        self.assertEqual(daily_hours(records, worker="bo"), {date(2024, 3, 4): 1.0})

    def test_positive_offset_night_shift_is_split_in_utc(self):
        # 01:00-09:00 at +05:00 is 20:00-04:00 UTC: 4 h on the 9th, 4 h on the 10th.
        records = [{"worker": "ravi", "in": "2024-03-10T01:00:00+05:00", "out": "2024-03-10T09:00:00+05:00"}]
        self.assertEqual(daily_hours(records), {date(2024, 3, 9): 4.0, date(2024, 3, 10): 4.0})

    def test_negative_offset_evening_shift_is_next_utc_day(self):
        # 20:00-23:30 at -05:00 is 01:00-04:30 UTC on the next day.
        records = [{"worker": "lee", "in": "2024-03-09T20:00:00-05:00", "out": "2024-03-09T23:30:00-05:00"}]
        self.assertEqual(daily_hours(records), {date(2024, 3, 10): 3.5})

    def test_pieces_never_negative(self):
        shift = Shift.from_record({"worker": "lee", "in": "2024-03-09T22:00:00-05:00", "out": "2024-03-10T02:00:00-05:00"})
        pieces = list(shift.pieces())
        self.assertTrue(all(hours > 0 for _, hours in pieces), pieces)
        self.assertEqual(sum(h for _, h in pieces), 4.0)
        self.assertEqual(pieces, [(date(2024, 3, 10), 4.0)])

    def test_mixed_offsets_sum_per_utc_day(self):
        records = [
            {"worker": "ana", "in": "2024-03-04T23:30:00+01:00", "out": "2024-03-05T01:30:00+01:00"},
            {"worker": "bo", "in": "2024-03-04T17:00:00-08:00", "out": "2024-03-04T18:00:00-08:00"},
        ]
        self.assertEqual(daily_hours(records), {date(2024, 3, 4): 1.5, date(2024, 3, 5): 1.5})


class ShiftTest(unittest.TestCase):
    def test_duration_across_offsets(self):
        shift = Shift.from_record({"worker": "ana", "in": "2024-03-04T08:00:00+01:00", "out": "2024-03-04T08:00:00+00:00"})
        self.assertEqual(shift.hours, 1.0)

    def test_end_before_start_rejected(self):
        with self.assertRaises(ValueError):
            Shift.from_record({"worker": "ana", "in": "2024-03-04T10:00:00+02:00", "out": "2024-03-04T07:30:00Z"})

    def test_missing_field(self):
        with self.assertRaisesRegex(ValueError, "out"):
            Shift.from_record({"worker": "ana", "in": "2024-03-04T10:00:00Z"})

    def test_bad_timestamp(self):
        with self.assertRaisesRegex(ValueError, "ISO 8601"):
            parse_timestamp("yesterday")


class WeeklyHoursTest(unittest.TestCase):
    def test_week_of_utc_shift(self):
        records = [{"worker": "bo", "in": "2024-03-04T09:00:00", "out": "2024-03-04T17:00:00"}]
        self.assertEqual(weekly_hours(records), {("bo", (2024, 10)): 8.0})

    def test_week_uses_utc_start_day(self):
        # Monday 02:00 at +09:00 is still Sunday 17:00 UTC: ISO week 9, not 10.
        records = [{"worker": "yu", "in": "2024-03-04T02:00:00+09:00", "out": "2024-03-04T06:00:00+09:00"}]
        self.assertEqual(weekly_hours(records), {("yu", (2024, 9)): 4.0})


if __name__ == "__main__":
    unittest.main()
