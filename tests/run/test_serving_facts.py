"""Every trial row says what served the model (farm/run/serving_facts.py): asked of the endpoint
through real HTTP, the rest from the preset's pin, and which is which."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from farm.agent.policies.server import start_policy_server
from farm.config import load_config
from farm.run.driver import run_experiment
from farm.run.serving_facts import cache_mode, probe_facts
from farm.store.results import ResultStore

REV = "b90468c11a913c1916b4542b4b7a530ec42024a4"


class _Front(BaseHTTPRequestHandler):
    """Answers /v1/models and /version as vLLM's OpenAI server does (owned_by "vllm", a version),
    and passes chat completions through to a real farm policy server behind it."""

    upstream = ""
    owner = "vllm"
    version: str | None = "0.32.0"
    model = "oracle"

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/v1/models":
            card = {"id": self.model, "object": "model", "owned_by": self.owner, "root": "microsoft/FrogNano-4B-2609"}
            self._send(200, json.dumps({"object": "list", "data": [card]}).encode())
        elif self.path == "/version" and self.version:
            self._send(200, json.dumps({"version": self.version}).encode())
        else:
            self._send(404, b'{"detail": "Not Found"}')

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        resp = httpx.post(self.upstream + self.path.removeprefix("/v1"), content=body, headers=headers, timeout=60)
        self._send(resp.status_code, resp.content)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def front() -> Iterator[tuple[str, type[_Front]]]:
    with start_policy_server("oracle") as policy:
        handler = type("Front", (_Front,), {"upstream": policy.base_url.rstrip("/")})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
        finally:
            server.shutdown()
            server.server_close()


@pytest.mark.integration
def test_rows_of_a_real_run_carry_what_served_and_where_it_came_from(front, tmp_path: Path) -> None:
    url, _ = front
    cfg = load_config(["model=frognano-4b", "agent=leaf", f"model.base_url={url}", "model.name=oracle",
                       "benchmark=builtin", "benchmark.limit=1", "run.executor=local", "run.preflight_sandbox=false",
                       f"store.uri={tmp_path / 'store'}", f"sandbox.local.root_dir={tmp_path / 'sb'}"])
    summary = asyncio.run(run_experiment(cfg))
    rows = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id).to_pylist()
    assert rows
    for row in rows:
        assert (row["engine"], row["engine_version"]) == ("vllm", "0.32.0")
        assert (row["served_revision"], row["weights_sha256"], row["cache_mode"]) == (REV, "4e5fb2d8", "prefix")
        origin = dict(item.split("=") for item in row["serving_origin"].split())
        assert origin == {"engine": "server", "engine_version": "server", "served_revision": "preset",
                          "weights_sha256": "preset", "cache_mode": "preset"}


@pytest.mark.integration
def test_a_server_that_names_no_engine_leaves_it_null(front) -> None:
    url, handler = front
    handler.owner, handler.version = "organization_owner", "9.9.9"  # an account, and some other server's /version
    facts = asyncio.run(probe_facts(load_config(["model=qwen3.5-4b", f"model.base_url={url}", "model.name=oracle"])))
    assert facts.engine is None and facts.engine_version is None
    assert facts.served_revision is None and facts.cache_mode == "prefix"  # no pin: null, not a guess
    assert facts.origin == "cache_mode=preset"


def test_an_endpoint_that_does_not_answer_keeps_the_preset_values() -> None:
    cfg = load_config(["model=frognano-4b", "model.base_url=http://127.0.0.1:9/v1"])
    facts = asyncio.run(probe_facts(cfg, timeout_s=2.0))
    assert facts.engine is None and facts.served_revision == REV
    assert "served_revision=preset" in (facts.origin or "")


def test_policy_runs_name_farm_as_the_engine() -> None:
    facts = asyncio.run(probe_facts(load_config(["agent=oracle"])))
    assert facts.engine == "farm-policy" and facts.served_revision is None


def test_cache_mode_words() -> None:
    assert cache_mode({"enable_prefix_caching": True}) == "prefix"
    assert cache_mode({"enable_prefix_caching": False}) == "off"
    assert cache_mode({}) is None  # the engine's own default: not claimed
    assert cache_mode({"enable_prefix_caching": True, "mamba_cache_mode": "align"}) == "prefix,mamba=align"


def test_validate_show_lists_each_arms_pin_engine_and_cache() -> None:
    from farm.config.arms import arms_of
    from farm.run.serving_facts import render_serving

    text = render_serving(arms_of(load_config(["experiment=reproduce-frognano", "model.base_url=http://127.0.0.1:9/v1"])))
    lines = {ln.split(":")[0].strip(): ln for ln in text.splitlines()[1:]}
    # reproduce-frognano runs each arm with its strict twin (experiment.strict_pair): same checkpoint
    arms = {"frognano-4b", "qwen3.5-4b", "frognano-4b-card", "frognano-4b-sglang"}
    # and the TB2 timeout arm, which has no twin (strict: false)
    assert set(lines) == arms | {f"{a}-strict" for a in arms} | {"frognano-4b-timeouts-4x"}
    assert lines["frognano-4b-timeouts-4x"].split(":", 1)[1] == lines["frognano-4b"].split(":", 1)[1]
    assert f"revision {REV}" in lines["frognano-4b-strict"]
    assert f"revision {REV}" in lines["frognano-4b"] and "weights sha256 4e5fb2d8" in lines["frognano-4b"]
    assert f"revision {REV}" in lines["frognano-4b-sglang"] and "engine sglang" in lines["frognano-4b-sglang"]
    assert "revision not pinned" in lines["qwen3.5-4b"]
    # SGLang names its cache settings differently: the radix cache with the Mamba extra buffer
    assert "cache radix,mamba=extra_buffer, cached-token details on" in lines["frognano-4b-sglang"]
    for name, line in lines.items():
        if "sglang" not in name:
            assert "engine vllm" in line
            assert "cache prefix, cached-token details on" in line and "language_model_only True" in line
