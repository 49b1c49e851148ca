#!/bin/bash
# Builds /app/tempconv: main and feature/kelvin both changed format_temp().
set -euo pipefail
# Own identity, so the commit ids do not depend on the environment the build runs in.
export GIT_AUTHOR_NAME=farm GIT_AUTHOR_EMAIL=farm@example.invalid GIT_COMMITTER_NAME=farm GIT_COMMITTER_EMAIL=farm@example.invalid
mkdir -p /app/tempconv/tests && cd /app/tempconv
git init -q -b main
n=0
commit() {  # fixed dates make the commit ids reproducible
  n=$((n + 1))
  GIT_AUTHOR_DATE="2024-06-0${n}T10:00:00Z" GIT_COMMITTER_DATE="2024-06-0${n}T10:00:00Z" git commit -qm "$1"
}
touch tests/__init__.py
printf "__pycache__/\n*.pyc\n" > .gitignore
cat > tempconv.py <<'PY'
"""Temperature conversions."""


def c_to_f(celsius):
    return celsius * 9 / 5 + 32


def f_to_c(fahrenheit):
    return (fahrenheit - 32) * 5 / 9


def format_temp(value, unit="C"):
    return f"{value:.1f} {unit}"
PY
cat > tests/test_basic.py <<'PY'
import unittest

from tempconv import c_to_f, f_to_c


class BasicTest(unittest.TestCase):
    def test_round_trip(self):
        self.assertEqual(c_to_f(100), 212)
        self.assertAlmostEqual(f_to_c(c_to_f(37.5)), 37.5)
PY
git add -A && commit "tempconv: Celsius and Fahrenheit"

git checkout -q -b feature/kelvin
python3 - <<'PY'
from pathlib import Path
p = Path("tempconv.py")
s = p.read_text()
s = s.replace('''def format_temp(value, unit="C"):
    return f"{value:.1f} {unit}"
''', '''def c_to_k(celsius):
    if celsius < -273.15:
        raise ValueError(f"below absolute zero: {celsius}")
    return celsius + 273.15


def format_temp(value, unit="C"):
    if unit not in ("C", "F", "K"):
        raise ValueError(f"unknown unit {unit!r}")
    return f"{value:.1f} {unit}"
''')
p.write_text(s)
PY
cat > tests/test_kelvin.py <<'PY'
import unittest

from tempconv import c_to_k, format_temp


class KelvinTest(unittest.TestCase):
    def test_c_to_k(self):
        self.assertAlmostEqual(c_to_k(0), 273.15)
        with self.assertRaises(ValueError):
            c_to_k(-300)

    def test_unknown_unit(self):
        with self.assertRaises(ValueError):
            format_temp(1, "X")
PY
git add -A && commit "Add Kelvin; reject unknown units"

git checkout -q main
python3 - <<'PY'
from pathlib import Path
p = Path("tempconv.py")
s = p.read_text()
s = s.replace('''def format_temp(value, unit="C"):
    return f"{value:.1f} {unit}"
''', '''def format_temp(value, unit="C", precision=1):
    return f"{value:.{precision}f} \\N{DEGREE SIGN}{unit}"
''')
p.write_text(s)
PY
cat > tests/test_format.py <<'PY'
import unittest

from tempconv import format_temp


class FormatTest(unittest.TestCase):
    def test_degree_sign_and_precision(self):
        self.assertEqual(format_temp(21.456), "21.5 \N{DEGREE SIGN}C")
        self.assertEqual(format_temp(70, "F", precision=0), "70 \N{DEGREE SIGN}F")
PY
git add -A && commit "format_temp: degree sign and precision"
