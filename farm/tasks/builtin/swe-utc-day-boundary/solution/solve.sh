#!/bin/bash
# Reference fix: convert to UTC before taking the calendar date.
set -euo pipefail
python3 - <<'PY'
from pathlib import Path
path = Path("shiftlog/timeutil.py")
text = path.read_text()
old = '    """The payroll day a moment belongs to."""\n    return moment.date()\n'
new = '    """The payroll day a moment belongs to (payroll days are UTC days)."""\n    return moment.astimezone(timezone.utc).date()\n'
assert old in text, "timeutil.day_of changed; cannot apply the reference fix"
path.write_text(text.replace(old, new))
PY
