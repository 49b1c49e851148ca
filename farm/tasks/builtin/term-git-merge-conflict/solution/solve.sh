#!/bin/bash
# Reference solution: merge, then write the conflicted region by hand (c_to_k + combined format_temp).
set -euo pipefail
cd /app/tempconv
git checkout -q main
git merge --no-edit feature/kelvin || true
python3 - <<'PY'
import re
from pathlib import Path
path = Path("tempconv.py")
text = path.read_text()
text = re.sub(r"<<<<<<< [^\n]*\n.*?=======\n.*?>>>>>>> [^\n]*\n", lambda m: '''def c_to_k(celsius):
    if celsius < -273.15:
        raise ValueError(f"below absolute zero: {celsius}")
    return celsius + 273.15


def format_temp(value, unit="C", precision=1):
    if unit not in ("C", "F", "K"):
        raise ValueError(f"unknown unit {unit!r}")
    sign = "" if unit == "K" else "\\N{DEGREE SIGN}"
    return f"{value:.{precision}f} {sign}{unit}"
''', text, flags=re.S)
path.write_text(text)
PY
python3 -m unittest discover -s tests -t . >/dev/null 2>&1
git add tempconv.py
git commit -q --no-edit
