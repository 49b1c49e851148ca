"""The served application as data, and the fail-fast checks (no Ray or vLLM needed)."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml

from farm.errors import ConfigError
from farm.serve.app import ROUTERS, check_serving, llm_config, serve_config, source_kind
from farm.serve.ready import ServeError, models_listed, wait_ready
from tests.support.config import make_config as cfg

PRESETS = ("frognano-4b", "qwen3.5-4b", "gemma-4-12b", "tiny-cpu")


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_validate_and_build(preset):
    c = cfg(f"model={preset}")
    check_serving(c, check_port=False, check_files=False)
    out = llm_config(c)
    assert out["model_loading_config"]["model_id"] == preset
    ek = out["engine_kwargs"]
    assert ek["enable_auto_tool_choice"] is True and ek["enable_prefix_caching"] is True
    rc = out["deployment_config"]["request_router_config"]
    assert rc["request_router_class"] == ROUTERS["PrefixCacheAffinityRouter"]
    # the session header the agent sends is what the session router would key on
    assert out["runtime_env"]["env_vars"]["RAY_SERVE_SESSION_ID_HEADER_KEY"] == "x-farm-session"
    yaml.safe_dump(serve_config(c))  # a Serve config file is plain YAML


def test_frognano_preset_is_the_vendor_harness():
    m = cfg("model=frognano-4b").model
    assert m.serving.source == "microsoft/FrogNano-4B-2609"
    ek = m.serving.engine_kwargs
    assert (ek["tool_call_parser"], ek["reasoning_parser"], ek["max_model_len"]) == ("qwen3_coder", "qwen3", 131072)
    assert m.temperature == 0.6
    assert {k: m.extra_body[k] for k in ("top_p", "top_k", "min_p")} == {"top_p": 0.95, "top_k": 20, "min_p": 0.0}
    assert m.extra_body["chat_template_kwargs"] == {"enable_thinking": True}
    base = cfg("model=qwen3.5-4b").model
    assert base.serving.source == "Qwen/Qwen3.5-4B"
    assert base.extra_body == m.extra_body and base.serving.engine_kwargs == ek


def test_cpu_and_gpu_placement():
    cpu = llm_config(cfg("model=tiny-cpu"))
    assert cpu["accelerator_config"] == {"kind": "cpu"} and "accelerator_type" not in cpu
    gpu = llm_config(cfg("model=frognano-4b", "model.serving.accelerator_type=H200"))
    assert gpu["accelerator_type"] == "H200" and "accelerator_config" not in gpu
    with pytest.raises(ConfigError, match="accelerator_type"):
        check_serving(cfg("model=tiny-cpu", "model.serving.accelerator_type=H100"), check_port=False, check_files=False)


def test_replicas_autoscaling_and_router_settings():
    fixed = llm_config(cfg("model=frognano-4b", "model.serving.num_replicas=3"))["deployment_config"]
    assert fixed["autoscaling_config"] == {"min_replicas": 3, "max_replicas": 3}
    auto = llm_config(cfg(
        "model=frognano-4b", "model.serving.min_replicas=2", "model.serving.max_replicas=16",
        "model.serving.router=ConsistentHashRouter", "model.serving.router_kwargs.num_fallback_replicas=0",
        "model.serving.deployment_config.health_check_period_s=30",
    ))["deployment_config"]
    assert auto["autoscaling_config"] == {"min_replicas": 2, "max_replicas": 16, "initial_replicas": 2,
                                          "target_ongoing_requests": 64}
    assert auto["max_ongoing_requests"] == 256 and auto["health_check_period_s"] == 30
    assert auto["request_router_config"] == {
        "request_router_class": ROUTERS["ConsistentHashRouter"], "request_router_kwargs": {"num_fallback_replicas": 0}}
    with pytest.raises(ConfigError, match="min_replicas"):
        check_serving(cfg("model=frognano-4b", "model.serving.min_replicas=4", "model.serving.max_replicas=2"),
                      check_port=False, check_files=False)


@pytest.mark.parametrize("field,value,match", [
    ("tool_call_parser", "qwen4_coder", "tool_call_parser"),
    ("reasoning_parser", "nope", "reasoning_parser"),
    ("model", "x", "not allowed"),
])
def test_bad_engine_kwargs_fail_fast(field, value, match):
    c = cfg("model=frognano-4b", f"model.serving.engine_kwargs.{field}={value}")
    with pytest.raises(ConfigError, match=match) as err:
        check_serving(c, check_port=False, check_files=False)
    assert value in str(err.value) or field in str(err.value)


def test_unknown_router_and_unservable_endpoint():
    with pytest.raises(ConfigError, match="model.serving.router"):
        check_serving(cfg("model=frognano-4b", "model.serving.router=Fastest"), check_port=False, check_files=False)
    with pytest.raises(ConfigError, match="model.serving.source"):
        check_serving(cfg("model=endpoint"), check_port=False)


def test_missing_model_path(tmp_path: Path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ConfigError, match="no such directory") as err:
        check_serving(cfg("model=frognano-4b", f"model.serving.source={missing}"), check_port=False)
    assert str(missing) in str(err.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="config.json"):
        check_serving(cfg("model=frognano-4b", f"model.serving.source={tmp_path / 'empty'}"), check_port=False)
    # the tiny preset builds its directory, so a missing one is fine there
    check_serving(cfg("model=tiny-cpu", f"model.serving.source={missing}"), check_port=False, check_files=True)


@pytest.mark.parametrize("size", ["0.5b", "1.5b"])
def test_real_model_presets_name_their_serving_dtype(size):
    c = cfg(f"model=qwen2.5-coder-{size}-cpu")
    check_serving(c, check_port=False, check_files=False)
    assert c.model.name.endswith(".bf16") and llm_config(c)["engine_kwargs"]["dtype"] == "bfloat16"
    # the dtype alone changed would leave every row saying bf16: refused, naming the field
    with pytest.raises(ConfigError, match=r"'model.serving.engine_kwargs.dtype'.*says \.bf16"):
        check_serving(cfg(f"model=qwen2.5-coder-{size}-cpu", "model.serving.engine_kwargs.dtype=float32"),
                      check_port=False, check_files=False)
    # both changed: the id now says what is served
    name = c.model.name.removesuffix(".bf16") + ".fp32"
    check_serving(cfg(f"model=qwen2.5-coder-{size}-cpu", "model.serving.engine_kwargs.dtype=float32",
                      f"model.name={name}"), check_port=False, check_files=False)


def test_port_taken():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(ConfigError, match=f"serve.port.*127.0.0.1:{port} is already in use"):
            check_serving(cfg("model=frognano-4b", f"serve.port={port}"), check_files=False)


def test_port_of_a_server_that_just_stopped_is_free():
    """A stopped server's port keeps TIME_WAIT connections for a minute; restarting `farm serve`
    on it must work (the real server binds with SO_REUSEADDR), found restarting a real serve."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = listener.accept()
        conn.close()  # the server side closes first, so the server's port is left in TIME_WAIT
        client.recv(1)
        client.close()
    with socket.socket() as plain:  # the premise: a plain bind is refused now
        with pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))
    check_serving(cfg("model=frognano-4b", f"serve.port={port}"), check_files=False)


def test_source_kinds(tmp_path: Path):
    assert source_kind("microsoft/FrogNano-4B-2609") == "hub"
    assert source_kind("s3://bucket/models/x") == "bucket"
    assert source_kind("/models/x") == "local"
    assert source_kind("~/models/x") == "local"
    assert llm_config(cfg("model=tiny-cpu", "model.serving.source=~/m"))["model_loading_config"]["model_source"] \
        == str(Path("~/m").expanduser())


class _Models(BaseHTTPRequestHandler):
    body = b'{"object": "list", "data": [{"id": "tiny-cpu"}]}'

    def do_GET(self):  # noqa: N802
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def models_server():
    srv = HTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_ready_needs_running_app_and_listed_model(models_server):
    assert models_listed(models_server, "tiny-cpu")
    assert not models_listed(models_server, "other")
    assert not models_listed("http://127.0.0.1:9/v1", "tiny-cpu")
    states = iter([("DEPLOYING", ""), ("DEPLOYING", ""), ("RUNNING", "")])
    seen = []
    wait_ready("farm", models_server, "tiny-cpu", 30, poll_s=0.01, state=lambda app: next(states),
               on_wait=lambda s, t: seen.append(s))
    assert seen == ["DEPLOYING"]
    # /v1/models answering is not enough while Serve still deploys the engine
    with pytest.raises(ServeError, match="not ready after 0.05s.*DEPLOYING"):
        wait_ready("farm", models_server, "tiny-cpu", 0.05, poll_s=0.01, state=lambda app: ("DEPLOYING", ""))


def test_failed_deployment_is_reported_at_once(models_server):
    with pytest.raises(ServeError, match="DEPLOY_FAILED: .*Unknown engine argument: foo"):
        wait_ready("farm", models_server, "tiny-cpu", 600, poll_s=0.01,
                   state=lambda app: ("DEPLOY_FAILED", "LLMServer: Unknown engine argument: foo"))


@pytest.mark.serve_stack("vllm")  # the engine-argument check needs vLLM's own argument list
def test_unknown_engine_argument_with_vllm_installed():
    with pytest.raises(ConfigError, match=r"unknown vLLM engine argument\(s\) \['max_modle_len'\]"):
        check_serving(cfg("model=frognano-4b", "model.serving.engine_kwargs.max_modle_len=4096"),
                      check_port=False, check_files=False)


def test_farm_serve_fails_fast_with_one_line(tmp_path: Path):
    """Misconfiguration ends `farm serve` before any Ray or engine start: exit 2, field and value named."""
    import subprocess
    import sys
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with socket.socket() as probe:  # the other cases must not depend on the default port being free
            probe.bind(("127.0.0.1", 0))
            free = f"serve.port={probe.getsockname()[1]}"
        cases = [
            (["model=frognano-4b", f"serve.port={port}"], f"'serve.port': 127.0.0.1:{port} is already in use"),
            (["model=frognano-4b", free, f"model.serving.source={tmp_path / 'nope'}"], "no such directory"),
            (["model=frognano-4b", free, "model.serving.engine_kwargs.tool_call_parser=qwen9"], "'qwen9'"),
            (["model=endpoint"], "has no 'model.serving.source'"),
        ]
        for overrides, message in cases:
            started = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "farm.cli", "serve", *overrides],
                                  capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
            assert proc.returncode == 2, (overrides, proc.stderr[-2000:])
            assert message in " ".join(proc.stderr.split()), proc.stderr[-2000:]
            assert "Traceback" not in proc.stderr
            assert time.monotonic() - started < 60
