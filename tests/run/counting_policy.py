"""A scripted policy endpoint in its own process that logs every request's trial session.

Used by the crash test: the log survives SIGKILLs of the farm driver, so the test can prove
that no trial committed before a kill was ever asked about again.
usage: python counting_policy.py SCRIPT PORT LOGFILE
"""

from __future__ import annotations

import sys
import time

import uvicorn

from farm.agent.policies.server import Policy, build_app

script, port, log_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
app = build_app(Policy("scripted", script))
log = open(log_path, "a", buffering=1)


@app.middleware("http")
async def record(request, call_next):
    if request.url.path.endswith("/chat/completions"):
        log.write(f"{time.time():.6f} {request.headers.get('x-farm-session', '-')}\n")
    return await call_next(request)


uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
