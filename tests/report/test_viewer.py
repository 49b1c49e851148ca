"""`farm view`: the run table, trial pages and side-by-side pages, written and served, from a real
store; a 10,000-trial run whose first page reads nothing of the steps; a headless Chromium that
clicks through run -> filter -> trial -> step on a real demo run."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from farm.cli import main
from farm.store import ResultStore
from farm.store.schema import STEPS_SCHEMA, TRIALS_SCHEMA, StepRow, TrialResult
from farm.view import RunView, ViewServer, open_view, write_site
from farm.view.data import page_name

RUN = "view-run"
LONG_OUTPUT = "\n".join(f"line {i} of a long listing" for i in range(60))
PATCH = "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


def _trial(task: str, arm: str, status: str, **extra) -> TrialResult:
    fields = {"exit_reason": "agent", "steps": 2, "attempt": 1, **extra}
    return TrialResult(run_id=RUN, trial_key=f"k{task}{arm}", benchmark="bench", task_id=task, seed=0, arm=arm,
                       model="m", status=status, attempt_uid=f"uid-{task}-{arm}-{fields['attempt']}",
                       config_hash="c", **fields)


def _steps(t: TrialResult) -> list[StepRow]:
    first = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Fix {t.task_id}."},
        {"role": "assistant", "content": f"Looking at {t.task_id} as {t.arm}.",
         "reasoning_content": f"I should list files for {t.task_id} first.",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": '{"cmd": "ls"}'}},
                        {"id": "c2", "type": "function", "function": {"name": "Read", "arguments": "{bad json"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": LONG_OUTPUT},
        {"role": "tool", "tool_call_id": "c2", "content": "short <script>alert(1)</script>"},
    ]
    last = [{"role": "assistant", "content": f"Done with {t.task_id}, try {t.attempt}."}]
    return [
        StepRow(run_id=RUN, trial_key=t.trial_key, attempt=t.attempt, step=0, attempt_uid=t.attempt_uid, latency_s=1.25,
                prompt_tokens=1000, completion_tokens=40, reasoning_tokens=12, n_tool_calls=2,
                tool_names=["Bash", "Read"], tool_durations_s=[0.5, 0.25], messages_json=json.dumps(first)),
        StepRow(run_id=RUN, trial_key=t.trial_key, attempt=t.attempt, step=1, attempt_uid=t.attempt_uid, latency_s=0.5,
                prompt_tokens=1100, completion_tokens=9, finish_reason="stop", messages_json=json.dumps(last)),
    ]


def _write_run(s: ResultStore) -> ResultStore:
    """Two arms on three tasks (one retried), written through the store like a run writes them."""
    from farm.store.schema import to_table

    s.write_run_meta(RUN, {"run_id": RUN, "config_hash": "c", "config": {"experiment": {"name": "t"}}})
    trials = [
        _trial("alpha", "base", "resolved"), _trial("alpha", "tools", "unresolved", hack_flags=["read_tests@0"]),
        _trial("beta", "base", "unresolved"), _trial("beta", "tools", "resolved"),
        _trial("gamma", "base", "infra_error", error_class="sandbox_start", error="first try", exit_reason=None),
        _trial("gamma", "base", "infra_error", error_class="sandbox_start", error="boom", exit_reason=None,
               attempt=2),
    ]
    # two batches, as the batch writer commits them: steps before trials
    for batch in (trials[:3], trials[3:5], trials[5:]):
        s.write_rows("steps", RUN, to_table([st for t in batch for st in _steps(t)], STEPS_SCHEMA))
        s.write_rows("trials", RUN, to_table(batch, TRIALS_SCHEMA))
    for t in trials[:4]:
        s.write_artifact(RUN, t.trial_key, 1, "patch.diff", PATCH.encode())
        s.write_artifact(RUN, t.trial_key, 1, "verifier.txt", f"verifier says {t.status}\n".encode())
    s.write_artifact(RUN, trials[5].trial_key, 2, "traceback.txt", b"Traceback: boom\n")
    return s


@pytest.fixture
def store(store_uri) -> ResultStore:
    """The run on a local directory and on a real S3 server (moto)."""
    uri, endpoint = store_uri
    return _write_run(ResultStore.open(uri, endpoint))


def _rows(trials_js: str) -> dict:
    prefix = "window.FARM_TRIALS="
    assert trials_js.startswith(prefix)
    return json.loads(trials_js[len(prefix):].rstrip().rstrip(";"))


def test_static_site_holds_every_trial_with_its_steps_patch_and_verifier(store, tmp_path):
    out = tmp_path / "site"
    stats = write_site(RunView.open(store, RUN), out)
    assert (stats.trial_pages, stats.pair_pages) == (5, 2)  # alpha and beta ran on both arms
    data = _rows((out / "trials.js").read_text())
    rows = [dict(zip(data["columns"], r)) for r in data["rows"]]
    assert [(r["task_id"], r["arm"], r["status"]) for r in rows][:2] == [("alpha", "base", "resolved"),
                                                                         ("alpha", "tools", "unresolved")]
    assert rows[1]["flags"] == ["read_tests"] and rows[0]["flags"] == []
    assert rows[4]["cell"] is None and rows[0]["cell"] == rows[1]["cell"]  # gamma ran on one arm only
    index = (out / "index.html").read_text()
    assert '<script src="trials.js"></script>' in index and "http" not in index.split("<body>")[1]

    page = (out / "t" / f"{rows[1]['page']}.html").read_text()
    assert page.count('<section class="step') == 2
    assert '<section class="step flagged" id="step-0">' in page  # read_tests@0
    assert "I should list files for alpha first." in page  # reasoning
    assert "Looking at alpha as tools." in page and "Done with alpha, try 1." in page
    assert "<span class=tool>Bash</span>" in page and "{bad json" in page  # malformed arguments as sent
    # the 60-line observation is folded, the short one open; tool output is escaped, never markup
    assert "<details class=\"obs\"><summary>observation · Bash · 0.50 s · 60 lines" in page
    assert '<details class="obs" open><summary>observation · Read · 0.25 s' in page
    assert "short &lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page
    assert "latency 1.25 s · prompt 1000 · completion 40 tokens · reasoning 12" in page
    assert '<span class="del">-x = 1</span>' in page and '<span class="add">+x = 2</span>' in page
    assert "verifier says unresolved" in page
    broken = (out / "t" / f"{rows[4]['page']}.html").read_text()
    assert "no patch or verifier output stored" in broken and "Traceback: boom" in broken
    assert "<h2>attempts (2)</h2>" in broken and "first try" in broken  # the retried attempt is listed
    # every attempt's steps: the latest open first, then the earlier one folded under its status and class
    latest, earlier = broken.split("<h2>earlier attempts (1)</h2>")
    assert latest.count('<section class="step') == 2 and "Done with gamma, try 2." in latest
    assert "try 1." not in latest and "Traceback: boom" in latest  # attempt 2's own artifact
    assert earlier.count('<section class="step') == 2 and "Done with gamma, try 1." in earlier
    assert earlier.startswith('\n<details class=attempt id="attempt1-top"><summary>attempt 1 · infra_error · '
                              'sandbox_start · 2 steps</summary>')
    assert '<dd class="s-infra_error">infra_error</dd>' in earlier and "first try" in earlier
    ids = re.findall(r' id="([^"]+)"', broken)
    assert len(ids) == len(set(ids)) and "attempt1-step-0" in ids  # the steps' anchors do not collide
    assert '<a href="#attempt1-top">1</a>' in latest and "2 (latest)" in latest

    pair = (out / "c" / f"{rows[0]['cell']}.html").read_text()
    assert pair.count("class=arm data-arm=") == 2
    assert "Looking at alpha as base." in pair and "Looking at alpha as tools." in pair


def test_served_pages_are_drawn_on_request_and_unknown_ones_are_404(store):
    view = RunView.open(store, RUN)
    server = ViewServer(view, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            assert "run view-run" in http.get("/").text
            assert len(_rows(http.get("/trials.js").text)["rows"]) == 5
            assert view.stats.step_rows == 0 and view.stats.index_rows == 0  # the run page reads no steps
            page = http.get(f"/t/{page_name('kbetatools')}.html")
            assert page.status_code == 200 and "Done with beta, try 1." in page.text
            assert view.stats.step_rows == 2 and view.stats.step_files == 1  # its own two steps, one file
            for path in ("/t/nosuchtrial.html", "/t/../../etc/passwd", "/c/0000.html", "/other"):
                r = http.get(path)
                assert r.status_code == 404, path
            assert "no trial page 'nosuchtrial'" in http.get("/t/nosuchtrial.html").text
    finally:
        server.shutdown()
        server.server_close()


def test_cli_writes_a_site_and_names_bad_input(tmp_path, capsys):
    store = _write_run(ResultStore.open(str(tmp_path / "store")))
    out = tmp_path / "site"
    assert main(["view", RUN, "--store", store.uri, "--out", str(out)]) == 0
    assert "5 trial pages, 2 side-by-side pages" in capsys.readouterr().out
    assert (out / "index.html").exists()
    assert main(["view", "nope", "--store", store.uri, "--out", str(out)]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
    assert main(["view", RUN, "--store", store.uri, "--port", "70000"]) == 2
    assert "'--port'" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["view", RUN, "--store", store.uri, "--out", str(tmp_path / "file")]) == 2
    assert "'--out'" in capsys.readouterr().err


def _interruptible() -> None:
    """Ctrl-C as a terminal gives it: a child inherits an ignored or blocked SIGINT from the
    process that starts it (a shell's background job, or this test process after an earlier
    test changed its own), and Python then never raises KeyboardInterrupt."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_cli_serves_on_loopback_until_ctrl_c(tmp_path):
    store = _write_run(ResultStore.open(str(tmp_path / "store")))
    proc = subprocess.Popen([sys.executable, "-m", "farm.cli", "view", RUN, "--store", store.uri, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_interruptible)
    try:
        line = proc.stdout.readline()
        url = re.search(r"at (http://127\.0\.0\.1:\d+/) ", line)
        assert url, line + proc.stderr.read()
        page = httpx.get(url.group(1) + f"t/{page_name('kbetatools')}.html", timeout=10)
        assert "Done with beta, try 1." in page.text
        proc.send_signal(signal.SIGINT)
        # both pipes drained while it stops (a full stderr pipe would block its exit), and a
        # loaded machine's interpreter shutdown allowed its time
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err[-2000:]
        assert "stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _full(schema: pa.Schema, columns: dict) -> pa.Table:
    """``columns`` with every other column of ``schema`` as nulls: files shaped like a run's."""
    n = len(next(iter(columns.values())))
    return pa.table({f.name: columns.get(f.name, pa.nulls(n, f.type)) for f in schema if f.name != "run_id"},
                    schema=schema.remove(schema.get_field_index("run_id")))


def _big_store(root: Path, n: int, steps_per_trial: int = 3, batch: int = 64) -> ResultStore:
    """``n`` trials in files of ``batch`` rows (the batch writer's default)."""
    s = ResultStore.open(str(root))
    s.write_run_meta("big", {"run_id": "big", "config_hash": "c", "config": {}})
    statuses = ["resolved", "unresolved", "model_error", "infra_error"]
    msg = json.dumps([{"role": "assistant", "content": "x" * 400,
                       "tool_calls": [{"id": "c", "function": {"name": "Bash", "arguments": "{}"}}]},
                      {"role": "tool", "tool_call_id": "c", "content": "y" * 1200}])
    keys = [f"t{i:06d}" for i in range(n)]
    steps = _full(STEPS_SCHEMA, {
        "trial_key": [k for k in keys for _ in range(steps_per_trial)],
        "attempt": pa.array([1] * n * steps_per_trial, pa.int64()),
        "step": pa.array([j for _ in keys for j in range(steps_per_trial)], pa.int64()),
        "attempt_uid": [f"u{k}" for k in keys for _ in range(steps_per_trial)],
        "messages_json": [msg] * n * steps_per_trial,
    })
    trials = _full(TRIALS_SCHEMA, {
        "trial_key": keys, "benchmark": ["b"] * n, "task_id": [f"task-{i // 4}" for i in range(n)],
        "seed": pa.array([0] * n, pa.int64()), "arm": [f"arm{i % 4}" for i in range(n)],
        "attempt": pa.array([1] * n, pa.int64()), "status": [statuses[i % 4] for i in range(n)],
        "steps": pa.array([steps_per_trial] * n, pa.int64()), "attempt_uid": [f"u{k}" for k in keys],
    })
    # straight into the store's layout (DESIGN.md): the store's own writer fsyncs every file, which
    # is right for a run and makes 314 files take seconds here
    for name, table, rows in (("steps", steps, batch * steps_per_trial), ("trials", trials, batch)):
        (root / name / "run_id=big").mkdir(parents=True)
        for i, start in enumerate(range(0, table.num_rows, rows)):
            pq.write_table(table.slice(start, rows), root / name / "run_id=big" / f"part-{i:05d}.parquet")
    return s


def test_ten_thousand_trials_first_page_reads_no_steps(tmp_path, capsys):
    """The run page of a 10,000-trial run reads the trials table only; a trial page then reads
    the one steps file holding its steps (timings go to docs/viewer.md, not into asserts)."""
    store = _big_store(tmp_path / "store", 10_000)
    t0 = time.perf_counter()
    view = open_view(store.uri, "big")
    server = ViewServer(view, port=0)
    _, index = server.page("/")
    _, rows = server.page("/trials.js")
    first = time.perf_counter() - t0
    assert len(_rows(rows.decode())["rows"]) == 10_000 and b"id=trials" in index
    assert (view.stats.index_rows, view.stats.step_rows, view.stats.step_files) == (0, 0, 0)
    t1 = time.perf_counter()
    _, page = server.page(f"/t/{page_name('t004321')}.html")
    trial = time.perf_counter() - t1
    assert page.count(b'<section class="step') == 3
    assert view.stats.step_rows == 3 and view.stats.step_files == 1  # not 30,000 rows, not 157 files
    assert view.stats.index_rows == 30_000  # the three-column index: built once, on the first trial page
    t2 = time.perf_counter()
    server.page(f"/t/{page_name('t004322')}.html")  # its neighbour: same batch, a cached file
    nxt = time.perf_counter() - t2
    assert view.stats.step_files == 1
    server.server_close()
    with capsys.disabled():
        print(f"\n10,000 trials: run page + trials.js {first:.2f}s ({len(rows) / 1e6:.1f} MB), "
              f"first trial page {trial:.2f}s, next {nxt * 1000:.0f}ms")


# -- a real browser ---------------------------------------------------------------------------
# the run table's count line once the rows are drawn (before that it says "loading…")
COUNT = "(document.getElementById('count').textContent.match(/ of .* trials/) || {input: ''}).input"
def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """Headless Chromium driven over the DevTools protocol (websocket-client, in the dev extra)."""

    def __init__(self, chromium: str, profile: Path) -> None:
        import websocket

        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
             "--disable-background-networking", "--disable-component-update", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", "--window-size=1280,900", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"chromium did not start: {self.proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        while True:  # the port file comes first, the first tab's target a moment later
            pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list").json() if t["type"] == "page"]
            if pages or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if not pages:
            self.close()
            raise RuntimeError("chromium started without a page target")
        target = pages[0]
        self.ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        self.n, self.errors = 0, []
        self.send("Page.enable")
        self.send("Runtime.enable")

    def send(self, method: str, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("method") == "Runtime.exceptionThrown":
                self.errors.append(msg["params"]["exceptionDetails"])
            if msg.get("id") == self.n:
                assert "error" not in msg, (method, msg["error"])
                return msg["result"]

    def eval(self, expr: str):
        r = self.send("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, r["exceptionDetails"]
        return r["result"].get("value")

    def wait(self, expr: str, timeout: float = 20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = self.eval(expr)
            except AssertionError:  # the page is navigating: its context went away
                value = None
            if value:
                return value
            time.sleep(0.1)
        # what the page holds, so that a failure in CI says why (the walk reads sessionStorage)
        state = self.eval("JSON.stringify({href: location.href, ready: document.readyState, "
                          "walk: (document.getElementById('walk') || {}).outerHTML || null, "
                          "storage: (function(){try{return Object.assign({}, sessionStorage);}"
                          "catch(e){return String(e);}})()})")
        raise AssertionError(f"timed out waiting for {expr}; page: {state}; page errors: {self.errors[-3:]}")

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait(f"location.href.startsWith({json.dumps(url.split('#')[0])}) && document.readyState==='complete'")

    def click(self, selector: str) -> None:
        """A mouse click at the element's centre: it must be visible and on top to get it."""
        xy = self.eval(f"""(function(){{var e=document.querySelector({json.dumps(selector)});if(!e)return null;
            e.scrollIntoView({{block:'center'}});var r=e.getBoundingClientRect();
            return r.width&&r.height?[r.x+r.width/2,r.y+r.height/2]:null;}})()""")
        assert xy, f"no visible element {selector}"
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=xy[0], y=xy[1], button="left", clickCount=1)

    def choose(self, name: str, value: str) -> None:
        """Pick an option of the run table's filter ``name`` as a user does (focus, key, change)."""
        self.eval(f"""(function(){{var s=document.querySelector('#filters [name={name}]');s.focus();
            s.value={json.dumps(value)};s.dispatchEvent(new Event('change',{{bubbles:true}}));}})()""")

    def close(self) -> None:
        if getattr(self, "ws", None):
            self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium = _chromium()
    if chromium is None:
        pytest.skip("chromium is not installed (apt package chromium; make test-setup installs it)")
    pytest.importorskip("websocket", reason="websocket-client is not installed (it comes with the dev extra)")
    b = Browser(chromium, tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[str, str]:
    """The demo experiment (arms oracle and partial) on two bundled tasks, run for real."""
    uri = str(tmp_path_factory.mktemp("demo") / "store")
    rc = main(["run", "-q", "experiment=demo", "run.executor=local", f"store.uri={uri}", "run.seeds=1",
               "benchmark.task_ids=[swe-memoize-cache-key,swe-dotenv-quoted-hash]", "run.max_in_flight=4"])
    assert rc == 0, f"the demo run exited {rc} (see its output above)"
    (run_id,) = ResultStore.open(uri).list_runs()
    return uri, run_id


@pytest.mark.integration  # a real demo run and a browser start: ~40 s on a loaded 2-core machine
def test_browser_clicks_through_run_filter_trial_step(browser, demo_run):
    uri, run_id = demo_run
    view = open_view(uri, run_id)
    server = ViewServer(view, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        browser.goto(server.url)
        assert browser.wait("document.querySelectorAll('#trials tbody tr').length") == 4
        # filter: the scripted arm, then only its resolved trial (the one the scanner flagged)
        browser.choose("arm", "partial")
        assert browser.wait(COUNT) == "2 of 4 trials"
        browser.choose("status", "resolved")
        assert browser.eval("document.getElementById('count').textContent") == "1 of 4 trials"
        assert "arm=partial" in browser.eval("location.hash") and "status=resolved" in browser.eval("location.hash")
        cells = browser.eval("[].map.call(document.querySelectorAll('#trials tbody td'),e=>e.textContent)")
        assert cells[:4] == ["swe-memoize-cache-key", "builtin", "0", "partial"] and "read_solution" in cells
        # trial: its page shows every stored step
        browser.click("#trials tbody a.trial")
        browser.wait("location.pathname.startsWith('/t/') && document.readyState==='complete'")
        trial = view.trial_by_page(browser.eval("location.pathname").split("/")[-1].removesuffix(".html"))
        assert (trial["arm"], trial["status"]) == ("partial", "resolved")
        n_steps = len(view.steps_of(trial))
        assert browser.eval("document.querySelectorAll('section.step').length") == n_steps == trial["steps"]
        # step: fold everything, open step 1's first observation, read what the tool returned
        browser.click("button[data-toggle=close]")
        browser.click("#step-1 h3 a")
        assert browser.eval("location.hash") == "#step-1"
        browser.click("#step-1 details.obs summary")
        shown = browser.eval("(function(){var d=document.querySelector('#step-1 details.obs');"
                             "var p=d.querySelector('pre');return [d.open,p.offsetHeight>0,p.textContent];})()")
        step1 = [m for m in view.steps_of(trial)[1]["messages"] if m["role"] == "tool"][0]
        assert shown == [True, True, step1["content"]]
        # the side-by-side page of the same task and seed: this arm on the left, oracle on the right
        browser.click("nav a[href^='../c/']")
        browser.wait("location.pathname.startsWith('/c/') && document.readyState==='complete'")
        arms = browser.eval("[].filter.call(document.querySelectorAll('.arm'),e=>!e.hidden).map(e=>e.dataset.arm)")
        assert arms == ["partial", "oracle"]
        # back to the run: the table as it was filtered
        browser.click("nav a[data-back]")
        assert browser.wait(f"location.pathname === '/index.html' && {COUNT}") == "1 of 4 trials"
        # and the static site opens from disk the same way
        out = Path(uri).parent / "site"
        write_site(view, out)
        browser.goto((out / "index.html").as_uri() + "#arm=partial")
        assert browser.wait(COUNT) == "2 of 4 trials"
        browser.click("#trials tbody a.trial")
        walk = "location.pathname.includes('/t/') && document.getElementById('walk').textContent"
        assert "1 of 2 in the run table" in browser.wait(walk)
        first = browser.eval("location.pathname")
        browser.click("#walk a[rel=next]")  # the next trial of the filtered table
        browser.wait(f"location.pathname !== {json.dumps(first)} && document.readyState==='complete'")
        assert "2 of 2 in the run table" in browser.wait(walk)
        second = view.trial_by_page(browser.eval("location.pathname").split("/")[-1].removesuffix(".html"))
        assert second["arm"] == "partial" and not first.endswith(f"/{page_name(second['trial_key'])}.html")
        assert browser.eval("document.querySelectorAll('section.step').length") == len(view.steps_of(second))
        # shown again from the back-forward cache after the table's order changed: the walk follows it
        here = page_name(second["trial_key"])
        order = json.dumps(["a", here, "b"])
        shown = browser.eval(f"sessionStorage.setItem('farm-view-order', {json.dumps(order)});"
                             "window.dispatchEvent(new PageTransitionEvent('pageshow', {persisted: true}));"
                             "document.getElementById('walk').textContent")
        assert "2 of 3 in the run table" in shown, shown
        assert browser.errors == []
    finally:
        server.shutdown()
        server.server_close()
