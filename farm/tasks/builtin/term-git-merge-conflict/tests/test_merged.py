import unittest

from tempconv import c_to_f, c_to_k, format_temp


class MergedTest(unittest.TestCase):
    def test_celsius_and_fahrenheit(self):
        self.assertEqual(format_temp(21.456), "21.5 \N{DEGREE SIGN}C")
        self.assertEqual(format_temp(70, "F", precision=0), "70 \N{DEGREE SIGN}F")
        self.assertEqual(format_temp(c_to_f(-40), "F"), "-40.0 \N{DEGREE SIGN}F")

    def test_kelvin(self):
        self.assertEqual(format_temp(300, "K"), "300.0 K")
        self.assertEqual(format_temp(c_to_k(0), "K", precision=2), "273.15 K")

    def test_units_validated(self):
        for unit in ("X", "c", "", "°C"):
            with self.assertRaises(ValueError):
                format_temp(1, unit)


if __name__ == "__main__":
    unittest.main()
