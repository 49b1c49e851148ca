#!/bin/bash
# Reference solution: a short Python program (timezone conversion is awkward in awk).
set -euo pipefail
python3 - <<'PY'
import re
from collections import Counter
from datetime import datetime, timezone

pattern = re.compile(r'(\S+) \S+ \S+ \[([^\]]+)\] "(\S+) (\S+) (\S+)" ([0-9]{3}) ([0-9]+|-)( |$)')
requests = malformed = total = 0
clients, statuses, paths, hours = set(), Counter(), Counter(), Counter()
with open("/app/logs/access.log", "rb") as fh:
    for raw in fh.read().decode("utf-8", "replace").split("\n"):
        if not raw:
            continue
        m = pattern.match(raw)
        try:
            assert m and 100 <= int(m[6]) <= 599
            when = datetime.strptime(m[2], "%d/%b/%Y:%H:%M:%S %z").astimezone(timezone.utc)
        except (AssertionError, ValueError):
            malformed += 1
            continue
        requests += 1
        clients.add(m[1])
        total += 0 if m[7] == "-" else int(m[7])
        statuses[int(m[6]) // 100] += 1
        paths[m[4].partition("?")[0]] += 1
        hours[when.strftime("%Y-%m-%d %H")] += 1
lines = [f"requests: {requests}", f"malformed: {malformed}", f"unique_clients: {len(clients)}", f"bytes: {total}"]
lines += [f"status {k}xx: {statuses[k]}" for k in (2, 3, 4, 5)]
lines.append("top paths:")
lines += [f"{n} {p}" for p, n in sorted(paths.items(), key=lambda kv: (-kv[1], kv[0]))[:5]]
hour, n = min(hours.items(), key=lambda kv: (-kv[1], kv[0]))
lines.append(f"busiest hour: {hour}:00 UTC ({n} requests)")
with open("/app/report.txt", "w") as fh:
    fh.write("\n".join(lines) + "\n")
PY
