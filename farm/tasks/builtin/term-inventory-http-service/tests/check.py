"""Hidden check: query the agent's service on 127.0.0.1:8642 and compare with the CSV."""

import csv
import json
import os
import socket
import time
import urllib.error
import urllib.request

BASE = "http://127.0.0.1:8642"


def load_items():
    with open("/tests/inventory.csv", newline="") as fh:
        return {r["sku"]: {"sku": r["sku"], "name": r["name"], "qty": int(r["qty"]), "price": float(r["price"])}
                for r in csv.DictReader(fh)}


def request(method, path, body=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(BASE + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data is not None else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Content-Type", ""), err.read()


def is_json(ctype, raw):
    if not ctype.startswith("application/json"):
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def wait_for_port(timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", 8642), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.2)
    return False


def checks():
    items = load_items()
    ordered = [items[k] for k in sorted(items)]
    if not wait_for_port():
        yield "service listens on 127.0.0.1:8642", False
        return
    status, _, body = request("GET", "/health")
    yield "GET /health", status == 200 and body.strip() == b"ok"
    status, ctype, body = request("GET", "/items")
    yield "GET /items lists every item sorted by sku", status == 200 and is_json(ctype, body) == ordered
    status, ctype, body = request("GET", "/items?min_qty=15")
    yield "GET /items?min_qty=15", status == 200 and is_json(ctype, body) == [i for i in ordered if i["qty"] >= 15]
    status, ctype, body = request("GET", "/items?min_qty=lots")
    yield "bad min_qty is a 400 with an error", status == 400 and "error" in (is_json(ctype, body) or {})
    status, ctype, body = request("GET", "/items/B-202")
    yield "GET /items/B-202 (quoted name)", status == 200 and is_json(ctype, body) == items["B-202"]
    status, ctype, body = request("GET", "/items/Z-999")
    yield "unknown sku is a 404", status == 404 and is_json(ctype, body) == {"error": "not found"}
    status, _, _ = request("GET", "/nothing/here")
    yield "unknown path is a 404", status == 404
    status, ctype, body = request("POST", "/items/B-201/reserve", {"count": 20})
    yield "reserve 20 of B-201", status == 200 and is_json(ctype, body) == dict(items["B-201"], qty=3)
    status, ctype, body = request("POST", "/items/B-201/reserve", {"count": 4})
    yield "reserving more than is left is a 409", status == 409 and is_json(ctype, body) == {"error": "insufficient stock"}
    status, ctype, body = request("GET", "/items/B-201")
    yield "the reservation is remembered", status == 200 and (is_json(ctype, body) or {}).get("qty") == 3
    status, ctype, body = request("GET", "/items?min_qty=4")
    listed = [i["sku"] for i in is_json(ctype, body) or []]
    yield "listings see the new quantity", status == 200 and "B-201" not in listed and "C-301" in listed
    for bad in ({"count": 0}, {"count": "2"}, {"count": -1}, {}, b"not json"):
        status, ctype, body = request("POST", "/items/A-100/reserve", bad)
        yield f"invalid reserve body {bad!r} is a 400", status == 400 and "error" in (is_json(ctype, body) or {})
    status, ctype, body = request("POST", "/items/Z-999/reserve", {"count": 1})
    yield "reserving an unknown sku is a 404", status == 404 and is_json(ctype, body) == {"error": "not found"}
    status, ctype, body = request("GET", "/items/A-100")
    yield "failed reservations change nothing", (is_json(ctype, body) or {}).get("qty") == 540


def main():
    ok = True
    for name, passed in checks():
        print(("PASS " if passed else "FAIL ") + name)
        ok = ok and passed
    os.makedirs("/logs/verifier", exist_ok=True)
    with open("/logs/verifier/reward.txt", "w") as fh:
        fh.write("1\n" if ok else "0\n")


if __name__ == "__main__":
    main()
