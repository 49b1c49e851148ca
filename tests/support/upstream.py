"""An "upstream" on the host's loopback serving a task's fix as a patch: a real HTTP server in a
thread of the test process, stopped by its own handle (tests/run/test_strict_pair.py, the red
team's ``upstream_fetch``)."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# the fix of tests/support/tasks.py's CHECK_ANSWER task and of the red team's task: answer.txt
FIX = """diff --git a/answer.txt b/answer.txt
new file mode 100644
--- /dev/null
+++ b/answer.txt
@@ -0,0 +1 @@
+fixed
"""


@contextmanager
def serve_upstream(root: Path, patch: str = FIX) -> Iterator[str]:
    """Serve ``patch`` as fix.patch from ``root`` on 127.0.0.1 (a free port); yields its URL."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "fix.patch").write_text(patch)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/fix.patch"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
