"""The Ray Serve LLM application farm deploys, built from ``model`` + ``serve`` config.

``llm_config(cfg)`` is a plain dict (no Ray or vLLM import) so that it can be checked offline,
written into a Serve config file (``serve deploy``) or a KubeRay ``serveConfigV2``, and turned
into ``ray.serve.llm.LLMConfig`` by ``build_app`` on a machine that has the serving stack.
``check_serving`` rejects misconfiguration before anything slow starts.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import socket
from pathlib import Path
from typing import Any

from farm.config import FarmConfig, ModelConfig
from farm.errors import ConfigError
from farm.serve import sglang

ROUTERS = {
    "PrefixCacheAffinityRouter": "ray.serve.llm.request_router:PrefixCacheAffinityRouter",
    "ConsistentHashRouter": "ray.serve.experimental.consistent_hash_router:ConsistentHashRouter",
    "PowerOfTwoChoicesRouter": "ray.serve._private.request_router:PowerOfTwoChoicesRequestRouter",
}
# The session-affinity router reads the session id from this header (Ray's default name); farm
# renames it to model.session_header through RAY_SERVE_SESSION_ID_HEADER_KEY.
SESSION_HEADER_ENV = "RAY_SERVE_SESSION_ID_HEADER_KEY"

# Parser names registered in vllm 0.32.0 (vllm.tool_parsers / vllm.reasoning). Used when vLLM is
# not importable here (a laptop preparing a cluster deployment); with vLLM installed, its live
# registry is the authority.
TOOL_PARSERS_0_32 = frozenset(
    "apertus cohere_command3 cohere_command4 deepseek_v3 deepseek_v31 deepseek_v32 deepseek_v4 "
    "deepseek_v41 dots ernie45 functiongemma gemma4 gigachat3 glm45 glm47 granite granite-20b-fc "
    "granite4 hermes hf hunyuan_a13b hy_v3 hy_v4 inkling internlm jamba k2_horizon kimi_k2 kimi_k3 "
    "lfm2 ling3 llama3_json llama4_json llama4_pythonic longcat mimo minicpm5 minimax_m2 minimax_m3 "
    "mistral muse_glimmer olmo3 openai phi4_mini_json plamo3 poolside_v1 pythonic qwen3_coder "
    "qwen3_json qwen3_xml seed_oss step3 step3p5 xlam".split()
)
REASONING_PARSERS_0_32 = frozenset(
    "cohere_command3 cohere_command4 deepseek_r1 deepseek_v3 deepseek_v4 deepseek_v41 ernie45 gemma4 "
    "glm45 glm47 granite granite_thinking_parser hf holo2 hunyuan_a13b hy_v3 hy_v4 inkling k2_horizon "
    "kimi_k2 kimi_k3 ling3 mimo minicpmv minimax_m2 minimax_m2_append_think minimax_m3 mistral "
    "muse_glimmer nemotron_v3 olmo3 openai_gptoss plamo3 poolside_v1 qwen3 seed_oss step3 step3p5".split()
)
# Parser names that farm's own vLLM plugins register (checked offline without importing vLLM).
FARM_TOOL_PARSERS = {"farm.serve.vllm_lenient_parser": frozenset({"hermes_lenient_json"})}
PLUGIN_CALLBACK = "farm.serve.plugins:ImportParserPlugins"
# Set by Ray Serve LLM from model_loading_config; vLLM must not see them twice.
FORBIDDEN_ENGINE_KWARGS = ("model", "served_model_name")
BUCKET_SCHEMES = ("s3://", "gs://", "abfss://", "azure://", "pyarrow-")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _registries(tool_parser_plugin: str | None = None) -> tuple[frozenset[str], frozenset[str], str]:
    try:
        from vllm.reasoning import ReasoningParserManager
        from vllm.tool_parsers import ToolParserManager
    except Exception:  # noqa: BLE001 - any import failure means "no live registry here"
        return TOOL_PARSERS_0_32 | FARM_TOOL_PARSERS.get(tool_parser_plugin or "", frozenset()), \
            REASONING_PARSERS_0_32, "vllm 0.32.0 (not importable here)"
    if tool_parser_plugin:
        import_parser_plugin(tool_parser_plugin)
    return (
        frozenset(ToolParserManager.list_registered()),
        frozenset(ReasoningParserManager.list_registered()),
        "the installed vllm",
    )


def import_parser_plugin(module: str) -> None:
    """Import a ``tool_parser_plugin`` (a dotted module name) so that its parser registers."""
    import importlib

    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure: the plugin cannot be used
        raise ConfigError(
            f"invalid value {module!r} for 'model.serving.engine_kwargs.tool_parser_plugin': "
            f"cannot import it as a module ({type(exc).__name__}: {exc})"
        ) from None


def engine_arg_names() -> frozenset[str] | None:
    """Every key Ray Serve LLM accepts in engine_kwargs, or None without vLLM installed."""
    try:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.launchers.cli_args import FrontendArgs
    except Exception:  # noqa: BLE001
        return None
    return frozenset(f.name for f in dataclasses.fields(AsyncEngineArgs)) | frozenset(
        f.name for f in dataclasses.fields(FrontendArgs)
    )


def source_kind(source: str) -> str:
    """``bucket`` | ``local`` | ``hub`` — how Ray Serve LLM will fetch the weights."""
    if source.startswith(BUCKET_SCHEMES):
        return "bucket"
    if source.startswith(("/", "./", "../", "~", "file://")) or Path(source).expanduser().exists():
        return "local"
    if HUB_ID.match(source):
        return "hub"
    return "local"


def model_source(model: ModelConfig) -> str:
    source = model.serving.source
    if not source:
        raise ConfigError(
            f"model {model.name!r} has no 'model.serving.source' (a hub id or local checkpoint path): "
            "it cannot be served; an external endpoint only needs model.base_url"
        )
    if source_kind(source) == "local":
        return str(Path(source.removeprefix("file://")).expanduser().resolve())
    return source


def check_serving(cfg: FarmConfig, *, check_port: bool = True, check_files: bool = True) -> None:
    """Fail fast, naming the field and value, on what would otherwise fail minutes later."""
    model, serving = cfg.model, cfg.model.serving
    source = model_source(model)
    if check_files and source_kind(source) == "local" and not serving.synthesize:
        if not Path(source).is_dir():
            raise ConfigError(f"invalid value {serving.source!r} for 'model.serving.source': no such directory")
        if not (Path(source) / "config.json").is_file():
            raise ConfigError(
                f"invalid value {serving.source!r} for 'model.serving.source': no config.json in it "
                "(not a Hugging Face checkpoint directory)"
            )
    if check_port:  # before the parser checks below, which import vLLM (seconds)
        check_port_free(cfg.serve.host, cfg.serve.port)
    if serving.synthesize not in (None, "tiny-qwen3"):
        raise ConfigError(
            f"invalid value {serving.synthesize!r} for 'model.serving.synthesize': choose 'tiny-qwen3' or null"
        )
    ek = serving.engine_kwargs
    check_dtype_suffix(model.name, ek.get("dtype"))
    if serving.engine == "sglang":
        sglang.check(model)
    else:
        _check_vllm(model)
    _check_deployment(model)


def _check_vllm(model: ModelConfig) -> None:
    ek = model.serving.engine_kwargs
    tools, reasoning, where = _registries(ek.get("tool_parser_plugin"))
    if ek.get("tool_call_parser") is not None and ek["tool_call_parser"] not in tools:
        raise ConfigError(
            f"invalid value {ek['tool_call_parser']!r} for 'model.serving.engine_kwargs.tool_call_parser': "
            f"not a tool parser of {where} (e.g. qwen3_coder, hermes, gemma4)"
        )
    if ek.get("reasoning_parser") is not None and ek["reasoning_parser"] not in reasoning:
        raise ConfigError(
            f"invalid value {ek['reasoning_parser']!r} for 'model.serving.engine_kwargs.reasoning_parser': "
            f"not a reasoning parser of {where} (e.g. qwen3, gemma4, deepseek_r1)"
        )
    if ek.get("tool_call_parser") and not ek.get("enable_auto_tool_choice"):
        raise ConfigError(
            "'model.serving.engine_kwargs.tool_call_parser' is set but enable_auto_tool_choice is not true: "
            "the agent sends tool_choice=auto, which vLLM rejects without it"
        )
    for key in FORBIDDEN_ENGINE_KWARGS:
        if key in ek:
            raise ConfigError(
                f"'model.serving.engine_kwargs.{key}' is not allowed: use model.serving.source / model.name"
            )
    known = engine_arg_names()
    if known is not None:
        unknown = sorted(set(ek) - known)
        if unknown:
            raise ConfigError(
                f"unknown vLLM engine argument(s) {unknown} in 'model.serving.engine_kwargs'"
            )


def _check_deployment(model: ModelConfig) -> None:
    serving = model.serving
    if serving.device == "cpu" and serving.accelerator_type:
        raise ConfigError(
            f"invalid value {serving.accelerator_type!r} for 'model.serving.accelerator_type': "
            "must be null when model.serving.device=cpu"
        )
    if serving.router not in ROUTERS and ":" not in serving.router:
        raise ConfigError(
            f"invalid value {serving.router!r} for 'model.serving.router': choose one of "
            f"{sorted(ROUTERS)} or give 'module:Class'"
        )
    if serving.num_replicas < 1:
        raise ConfigError(f"invalid value {serving.num_replicas!r} for 'model.serving.num_replicas': must be >= 1")
    lo, hi = serving.min_replicas, serving.max_replicas
    if (lo is None) != (hi is None) or (lo is not None and hi is not None and not 0 <= lo <= hi):
        raise ConfigError(
            f"invalid values min_replicas={lo!r} max_replicas={hi!r} in 'model.serving': give both, "
            "0 <= min <= max (or neither for a fixed num_replicas)"
        )


# A served id ending in one of these names the dtype the weights are served in (the real-model
# presets do: bf16 rounds their dequantized float32 weights once more). Rows record the id, so an
# override of the dtype alone would mislabel every row.
DTYPE_SUFFIXES = {"bf16": ("bfloat16",), "fp32": ("float32", "float"), "fp16": ("float16", "half")}


def check_dtype_suffix(name: str, dtype: str | None) -> None:
    suffix = name.rsplit(".", 1)[-1]
    if suffix in DTYPE_SUFFIXES and dtype not in DTYPE_SUFFIXES[suffix]:
        raise ConfigError(
            f"invalid value {dtype!r} for 'model.serving.engine_kwargs.dtype': the served id {name!r} "
            f"says .{suffix} ({DTYPE_SUFFIXES[suffix][0]}); change both, or neither"
        )


def check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # as the server will (uvicorn sets it): a port whose last server just stopped keeps
        # TIME_WAIT connections for a minute, which a server may bind over but a plain bind may not
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                f"invalid value {port!r} for 'serve.port': {host}:{port} is already in use ({exc.strerror}); "
                "pick another with serve.port=<n>"
            ) from None


def _deployment_config(model: ModelConfig) -> dict[str, Any]:
    s = model.serving
    dc: dict[str, Any] = {}
    if s.min_replicas is not None and s.max_replicas is not None:
        auto: dict[str, Any] = {"min_replicas": s.min_replicas, "max_replicas": s.max_replicas,
                                "initial_replicas": max(s.min_replicas, min(s.num_replicas, s.max_replicas))}
        if s.target_ongoing_requests is not None:
            auto["target_ongoing_requests"] = s.target_ongoing_requests
        dc["autoscaling_config"] = auto
    else:
        # Fixed size, expressed as autoscaling min == max: Ray Serve LLM would otherwise apply its
        # own autoscaling defaults on top of num_replicas.
        dc["autoscaling_config"] = {"min_replicas": s.num_replicas, "max_replicas": s.num_replicas}
    if s.max_ongoing_requests is not None:
        dc["max_ongoing_requests"] = s.max_ongoing_requests
    dc["request_router_config"] = {
        "request_router_class": ROUTERS.get(s.router, s.router),
        "request_router_kwargs": dict(s.router_kwargs),
    }
    return _deep_merge(dc, copy.deepcopy(dict(s.deployment_config)))


def _deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    for k, v in b.items():
        a[k] = _deep_merge(dict(a[k]), v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
    return a


def session_env(model: ModelConfig) -> dict[str, str]:
    """Environment the Serve proxy and ingress need so session routing keys on farm's header."""
    return {SESSION_HEADER_ENV: model.session_header.lower()}


def ingress_env(model: ModelConfig) -> dict[str, str]:
    """Environment the driver, the Serve proxy and the ingress need: session routing on farm's
    header, and what the engine asks for (farm/serve/sglang.py ``engine_env``)."""
    return {**session_env(model), **sglang.engine_env(model)}


def llm_config(cfg: FarmConfig) -> dict[str, Any]:
    """The LLMConfig of ``cfg.model`` as plain data (YAML-able; the same in CI and on a cluster)."""
    model, s = cfg.model, cfg.model.serving
    source = model_source(model)
    out: dict[str, Any] = {
        "model_loading_config": {"model_id": model.name, "model_source": source},
        "engine_kwargs": copy.deepcopy(dict(s.engine_kwargs)),
        "deployment_config": _deployment_config(model),
    }
    if s.engine == "sglang":
        out["server_cls"] = sglang.SERVER_CLS
        out["engine_kwargs"] = copy.deepcopy(sglang.engine_kwargs(model, source))
        if s.revision and source_kind(source) == "hub":
            out["engine_kwargs"].setdefault("revision", s.revision)  # SGLang's ServerArgs.revision
    elif s.revision and source_kind(source) == "hub":
        # the engine downloads exactly the pinned commit (weights, config and tokenizer alike)
        out["engine_kwargs"].setdefault("revision", s.revision)
        out["engine_kwargs"].setdefault("tokenizer_revision", s.revision)
    if s.device == "cpu":
        # Without this, Ray Serve LLM assumes a GPU bundle that never schedules on a CPU node.
        out["accelerator_config"] = {"kind": "cpu"}
        # vLLM's log stats are needed by Ray's engine metrics; CPU CI does not want either.
        out["log_engine_metrics"] = False
    elif s.accelerator_type:
        out["accelerator_type"] = s.accelerator_type
    plugin = s.engine_kwargs.get("tool_parser_plugin") if s.engine == "vllm" else None
    if plugin:
        # Ray Serve LLM never imports vLLM's tool_parser_plugin (vllm serve does): a callback
        # constructed in the replica before the engine starts imports it (farm/serve/plugins.py)
        out["callback_config"] = {"callback_class": PLUGIN_CALLBACK, "callback_kwargs": {"modules": [plugin]}}
    env = {**ingress_env(model), **{str(k): str(v) for k, v in (s.runtime_env.get("env_vars") or {}).items()}}
    out["runtime_env"] = {**copy.deepcopy(dict(s.runtime_env)), "env_vars": env}
    return out


def serve_config(cfg: FarmConfig) -> dict[str, Any]:
    """A Serve config file (``serve deploy`` / KubeRay ``serveConfigV2``) for the same application."""
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": cfg.serve.host, "port": cfg.serve.port},
        "applications": [{
            "name": cfg.serve.app_name,
            "route_prefix": "/",
            "import_path": "ray.serve.llm:build_openai_app",
            "runtime_env": {"env_vars": ingress_env(cfg.model)},
            "args": {"llm_configs": [llm_config(cfg)]},
        }],
    }


def build_app(cfg: FarmConfig) -> Any:
    """The Ray Serve application (needs ray[serve] and vLLM installed)."""
    try:
        from ray.serve.llm import LLMConfig, build_openai_app
    except ImportError as exc:
        raise ConfigError(
            f"serving needs ray[serve]==2.60.0 and vLLM 0.32.0 in this Python ({exc}); on CPU run "
            "scripts/install-serve-cpu.sh <venv>, on GPU pip install 'farm[serve]'"
        ) from None
    data = llm_config(cfg)
    if cfg.model.serving.engine == "sglang":
        _require_direct_streaming()
    try:
        config = LLMConfig(**data)
    except Exception as exc:  # pydantic ValidationError: one line per field is enough
        raise ConfigError(f"model {cfg.model.name!r}: Ray Serve LLM rejected the config: {exc}") from None
    return build_openai_app({"llm_configs": [config]})


def _require_direct_streaming() -> None:
    """Ray reads RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING once, when ray.llm is first imported: set
    later, SGLang would answer through Ray's own chat path, which has no tool-call parser."""
    from ray.llm._internal.serve import constants

    if not constants.RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING:
        raise ConfigError(
            f"model.serving.engine=sglang needs {sglang.DIRECT_STREAMING_ENV}=1 before ray.llm is imported "
            "(SGLang's parsers act only on its own OpenAI app): export it, or start a fresh `farm serve`"
        )


def base_url(cfg: FarmConfig) -> str:
    host = cfg.serve.host
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{cfg.serve.port}/v1"


def default_num_cpus(cfg: FarmConfig) -> int:
    """Logical CPUs for a Ray head started for serving: the LLMServer placement group alone asks
    for 2, and the run's own actors want room beside it; logical over-subscription is harmless."""
    return cfg.serve.num_cpus or max(8, os.cpu_count() or 1)
