"""The viewer's two outputs: a static site written once, or the same pages served on demand.

Both lay the pages out the same way, with relative links, so a static site opens from disk
(file://) and a served one from http://127.0.0.1:PORT::

    index.html          the run table (filters, sort, pages of 100 rows)
    trials.js           its rows
    t/<trial>.html      one trial: every step, the patch, the verifier output
    c/<cell>.html       every arm on one (benchmark, task, seed), two side by side

A served page is drawn when it is asked for, so opening a run of 10,000 trials reads its
trials table and nothing of its steps; a static site draws every page once.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from farm.errors import FarmError
from farm.store.results import ResultStore
from farm.view.data import RunView, ViewError, page_name
from farm.view.pages import pair_page, run_page, trial_page, trials_js

_ROUTE = re.compile(r"/(t|c)/([A-Za-z0-9_-]{1,64})\.html")
RENDERED_CACHE = 64  # served trial pages kept drawn (back and forth between a few trials)


def open_view(uri: str, run_id: str, endpoint: str | None = None, region: str | None = None) -> RunView:
    """Raises:
        StoreError: the store cannot be opened or read.
        ViewError: it holds no run ``run_id``.
    """
    return RunView.open(ResultStore.open(uri, endpoint, region, create=False), run_id)


@dataclass
class SiteStats:
    trial_pages: int
    pair_pages: int
    seconds: float


def write_site(view: RunView, out: Path, progress: Callable[[int, int], None] | None = None) -> SiteStats:
    """Write every page of ``view`` under ``out``; returns what was written and how long it took."""
    t0 = time.perf_counter()
    (out / "t").mkdir(parents=True, exist_ok=True)
    (out / "c").mkdir(exist_ok=True)
    (out / "index.html").write_text(run_page(view), encoding="utf-8")
    (out / "trials.js").write_text(trials_js(view), encoding="utf-8")
    trials = view.trials.to_pylist()
    # in the order of the files holding their steps: each file is decoded once (see FILE_CACHE)
    trials.sort(key=view.first_steps_file)
    for i, t in enumerate(trials, 1):
        (out / "t" / f"{page_name(t['trial_key'])}.html").write_text(trial_page(view, t), encoding="utf-8")
        if progress and (i % 500 == 0 or i == len(trials)):
            progress(i, len(trials))
    cells = view.cells()
    for name in cells.values():
        (out / "c" / f"{name}.html").write_text(pair_page(view, name), encoding="utf-8")
    return SiteStats(len(trials), len(cells), time.perf_counter() - t0)


class ViewServer(ThreadingHTTPServer):
    """Serves one run's pages, drawing each on its first request."""

    daemon_threads = True

    def __init__(self, view: RunView, port: int = 0, host: str = "127.0.0.1", quiet: bool = True) -> None:
        self.view = view
        self.quiet = quiet
        self._pages: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"

    def page(self, path: str) -> tuple[str, bytes]:
        """(content type, body) of the page at ``path``.

        Raises:
            ViewError: no such page.
        """
        with self._lock:
            if path in self._pages:
                self._pages.move_to_end(path)
                return _type(path), self._pages[path]
        if path in ("/", "/index.html"):
            body = run_page(self.view)
        elif path == "/trials.js":
            body = trials_js(self.view)
        elif m := _ROUTE.fullmatch(path):
            kind, name = m.groups()
            body = trial_page(self.view, self.view.trial_by_page(name)) if kind == "t" else pair_page(self.view, name)
        else:
            raise ViewError(f"no page {path!r}")
        data = body.encode("utf-8")
        with self._lock:
            self._pages[path] = data
            while len(self._pages) > RENDERED_CACHE + 2:
                self._pages.popitem(last=False)
        return _type(path), data


def _type(path: str) -> str:
    return "text/javascript; charset=utf-8" if path.endswith(".js") else "text/html; charset=utf-8"


class _Handler(BaseHTTPRequestHandler):
    server: ViewServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = unquote(urlsplit(self.path).path)
        try:
            ctype, body = self.server.page(path)
            status = 200
        except ViewError as exc:
            ctype, body, status = "text/plain; charset=utf-8", f"{exc}\n".encode(), 404
        except FarmError as exc:  # the store failed under a page: say so in the browser and the log
            ctype, body, status = "text/plain; charset=utf-8", f"{exc}\n".encode(), 500
            print(f"farm view: {path}: {exc}", file=sys.stderr)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
        if not self.server.quiet:
            super().log_message(format, *args)
