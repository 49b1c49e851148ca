"""Hidden check: recompute the report from a pristine copy of the log and compare exactly."""

import os
import re
import sys
from collections import Counter
from datetime import datetime, timezone

LINE = re.compile(r'^(\S+) \S+ \S+ \[([^\]]+)\] "(\S+) (\S+) (\S+)" (\d{3}) (\d+|-)(?: .*)?$')


def expected(text):
    valid, malformed = [], 0
    for raw in text.split("\n"):
        if raw == "":
            continue
        m = LINE.match(raw)
        if not m:
            malformed += 1
            continue
        try:
            when = datetime.strptime(m.group(2), "%d/%b/%Y:%H:%M:%S %z")
        except ValueError:
            malformed += 1
            continue
        status = int(m.group(6))
        if not 100 <= status <= 599:
            malformed += 1
            continue
        size = 0 if m.group(7) == "-" else int(m.group(7))
        valid.append((m.group(1), when, m.group(4).split("?", 1)[0], status, size))
    classes = Counter(s // 100 for _, _, _, s, _ in valid)
    paths = Counter(p for _, _, p, _, _ in valid)
    hours = Counter(w.astimezone(timezone.utc).strftime("%Y-%m-%d %H") for _, w, _, _, _ in valid)
    top = sorted(paths.items(), key=lambda kv: (-kv[1], kv[0].encode()))[:5]
    hour, count = sorted(hours.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    out = [f"requests: {len(valid)}", f"malformed: {malformed}",
           f"unique_clients: {len({v[0] for v in valid})}", f"bytes: {sum(v[4] for v in valid)}"]
    out += [f"status {c}xx: {classes.get(c, 0)}" for c in (2, 3, 4, 5)]
    out += ["top paths:"] + [f"{n} {p}" for p, n in top]
    out += [f"busiest hour: {hour}:00 UTC ({count} requests)"]
    return "\n".join(out) + "\n"


def main():
    with open("/tests/access.log", encoding="utf-8", errors="surrogateescape") as fh:
        want = expected(fh.read())
    try:
        with open("/app/report.txt", encoding="utf-8", errors="replace") as fh:
            got = fh.read()
    except OSError as exc:
        got = f"<cannot read /app/report.txt: {exc}>"
    ok = got == want
    if not ok:
        print("expected:\n" + want + "\ngot:\n" + got)
    print(f"reward: {int(ok)}")
    os.makedirs("/logs/verifier", exist_ok=True)
    with open("/logs/verifier/reward.txt", "w") as fh:
        fh.write("1\n" if ok else "0\n")


if __name__ == "__main__":
    sys.exit(main())
