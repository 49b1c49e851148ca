#!/bin/bash
# Reference solution: a stdlib http.server app, started detached so it outlives this shell.
set -euo pipefail
cat > /app/server.py <<'PY'
import csv
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

with open("/app/data/inventory.csv", newline="") as fh:
    ITEMS = {r["sku"]: {"sku": r["sku"], "name": r["name"], "qty": int(r["qty"]), "price": float(r["price"])}
             for r in csv.DictReader(fh)}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def send(self, status, payload):
        body = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if isinstance(payload, str) else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if url.path == "/health":
            return self.send(200, "ok")
        if parts == ["items"]:
            raw = parse_qs(url.query).get("min_qty", ["0"])[0]
            try:
                minimum = int(raw)
            except ValueError:
                return self.send(400, {"error": f"min_qty must be an integer, got {raw!r}"})
            with LOCK:
                return self.send(200, [dict(ITEMS[k]) for k in sorted(ITEMS) if ITEMS[k]["qty"] >= minimum])
        if len(parts) == 2 and parts[0] == "items":
            with LOCK:
                item = ITEMS.get(parts[1])
                return self.send(200, dict(item)) if item else self.send(404, {"error": "not found"})
        self.send(404, {"error": "not found"})

    def do_POST(self):
        parts = urlsplit(self.path).path.strip("/").split("/")
        if len(parts) != 3 or parts[0] != "items" or parts[2] != "reserve":
            return self.send(404, {"error": "not found"})
        length = int(self.headers.get("Content-Length") or 0)
        try:
            count = json.loads(self.rfile.read(length))["count"]
        except (ValueError, KeyError, TypeError):
            return self.send(400, {"error": "body must be JSON like {\"count\": 1}"})
        if type(count) is not int or count < 1:
            return self.send(400, {"error": "count must be a positive integer"})
        with LOCK:
            item = ITEMS.get(parts[1])
            if item is None:
                return self.send(404, {"error": "not found"})
            if item["qty"] < count:
                return self.send(409, {"error": "insufficient stock"})
            item["qty"] -= count
            return self.send(200, dict(item))

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", 8642), Handler).serve_forever()
PY
setsid nohup python3 /app/server.py >/app/server.log 2>&1 </dev/null &
for _ in $(seq 50); do
  python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8642), 1)' 2>/dev/null && exit 0
  sleep 0.1
done
echo "server did not start" >&2
cat /app/server.log >&2
exit 1
