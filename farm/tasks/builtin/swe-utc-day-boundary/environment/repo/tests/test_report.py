import unittest
from datetime import date

from shiftlog import daily_hours, weekly_hours


class DailyHoursTest(unittest.TestCase):
    def test_utc_shift_within_a_day(self):
        records = [{"worker": "ana", "in": "2024-03-04T08:00:00Z", "out": "2024-03-04T16:30:00Z"}]
        self.assertEqual(daily_hours(records), {date(2024, 3, 4): 8.5})

    def test_utc_shift_across_midnight(self):
        records = [{"worker": "ana", "in": "2024-03-04T22:00:00Z", "out": "2024-03-05T06:00:00Z"}]
        self.assertEqual(daily_hours(records), {date(2024, 3, 4): 2.0, date(2024, 3, 5): 6.0})


class WeeklyHoursTest(unittest.TestCase):
    def test_week_of_utc_shift(self):
        records = [{"worker": "bo", "in": "2024-03-04T09:00:00", "out": "2024-03-04T17:00:00"}]
        self.assertEqual(weekly_hours(records), {("bo", (2024, 10)): 8.0})


if __name__ == "__main__":
    unittest.main()
