"""SGLang as the second serving engine (``model.serving.engine: sglang``), through Ray Serve LLM's
``LLMConfig.server_cls`` = ray's ``SGLangServer``.

What ray 2.60.0's SGLangServer (ray/llm/_internal/serve/engines/sglang/sglang_engine.py) does, and
why farm's config for it looks the way it does:

- It hands ``engine_kwargs`` to ``sglang.srt.ray.engine.RayEngine(**engine_kwargs)``, i.e.
  ``ServerArgs(**engine_kwargs)``: the keys are SGLang's ServerArgs fields (``tp_size``,
  ``context_length``, ``tool_call_parser``...), not vLLM's, and it never reads
  ``model_loading_config``: farm sets ``model_path`` and ``served_model_name`` itself.
- Its own Python chat path renders the chat template and returns the raw text: no ``tool_calls``,
  no reasoning split, no top_k/min_p. Only with ``RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING=1`` does
  Serve hand requests to SGLang's own OpenAI app, where ``--tool-call-parser``,
  ``--reasoning-parser`` and ``--enable-cache-report`` act. Ray reads the variable when ray.llm is
  imported, so farm sets it for the driver, the application and the replicas (``engine_env``).
- Its placement group always asks ``tp_size * pp_size`` GPUs: ``device: cpu`` never schedules.

SGLang cannot be installed beside farm's serving stack (sglang 0.5.23 pins torch 2.14.1 and a CUDA
kernel wheel, ``sglang-kernel``; its CPU backend needs a kernel build that no registry ships), so
its argument names are recorded from the wheel (sglang_args_0_5_23.tsv, how: in its header) and
checked offline; with sglang importable, its live ServerArgs is the authority.

Hybrid (Gated DeltaNet) models: SGLang's Mamba radix cache misses unless its strategy is
``extra_buffer``. 0.5.23 names the setting ``mamba_radix_cache_strategy``; older releases (and
sgl-project/sglang#22935) spell it ``--mamba-scheduler-strategy``, which 0.5.23 rejects.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from farm.config import ModelConfig
from farm.errors import ConfigError

SGLANG_VERSION = "0.5.23"
SERVER_CLS = "ray.llm._internal.serve.engines.sglang:SGLangServer"
DIRECT_STREAMING_ENV = "RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING"
ARGS_FILE = Path(__file__).with_name("sglang_args_0_5_23.tsv")
# Set by farm from model.serving.source / model.name (Ray's ingress routes on the model id).
FORBIDDEN = ("model_path", "served_model_name")
# sglang 0.5.23's parser registries (sglang/srt/function_call/parser_names.py and
# sglang/srt/parser/reasoning_parser_names.py), plus the CLI's "auto".
TOOL_PARSERS_0_5_23 = frozenset(
    "auto apertus2509 beam cohere_command4 deepseekv3 deepseekv31 deepseekv32 deepseekv4 deepseekv41 dots "
    "gemma4 gigachat3 gigachat35 glm glm45 glm47 gpt-oss hermes hunyuan inkling interns1 iquest_q1 k2_horizon "
    "kimi_k2 kimi_k3 lfm2 ling3 llama3 mimo minicpm5 minimax-m2 minimax-m3 mistral muse nanbeige poolside_v1 "
    "pythonic qwen qwen25 qwen3_coder response_template spark25 step3 step3p5 trinity".split()
)
REASONING_PARSERS_0_5_23 = frozenset(
    "auto apertus2509 beam cohere_command4 deepseek-r1 deepseek-v3 deepseek-v4 deepseek-v41 dots gemma4 "
    "gigachat35 glm45 gpt-oss granite_thinking_parser hunyuan inkling interns1 iquest_q1 k2_horizon kimi "
    "kimi_k2 kimi_k3 ling3 mimo minimax minimax-append-think minimax-m3 mistral muse nanbeige nemotron_3 "
    "poolside_v1 qwen3 qwen3-thinking response_template step3 step3p5".split()
)
# What a vLLM-shaped or older-SGLang key is called in sglang 0.5.23 (the error names the fix).
RENAMED = {
    "mamba_scheduler_strategy": "mamba_radix_cache_strategy",
    "tensor_parallel_size": "tp_size",
    "max_model_len": "context_length",
    "max_num_seqs": "max_running_requests",
    "gpu_memory_utilization": "mem_fraction_static",
    "enable_prefix_caching": "disable_radix_cache (the radix cache is on by default)",
    "enable_prompt_tokens_details": "enable_cache_report",
    "enable_auto_tool_choice": "nothing (tool_call_parser alone enables tool calls)",
}


@functools.cache
def recorded_args() -> dict[str, tuple[str, str]]:
    """ServerArgs field -> (command-line option or '-', kind: true | value | list | none)."""
    out = {}
    for line in ARGS_FILE.read_text().splitlines():
        if line and not line.startswith("#"):
            name, option, kind = line.split("\t")
            out[name] = (option, kind)
    return out


def _live_arg_names() -> frozenset[str] | None:
    try:
        import msgspec
        from sglang.srt.server_args import ServerArgs
    except Exception:  # noqa: BLE001 - any import failure: no live sglang here
        return None
    return frozenset(f.name for f in msgspec.structs.fields(ServerArgs))


def engine_env(model: ModelConfig) -> dict[str, str]:
    """Environment the driver, the application and the replicas need for this model's engine."""
    return {DIRECT_STREAMING_ENV: "1"} if model.serving.engine == "sglang" else {}


def engine_kwargs(model: ModelConfig, source: str) -> dict[str, Any]:
    """The ServerArgs keyword arguments Ray's SGLangServer passes to SGLang."""
    return {"model_path": source, "served_model_name": model.name, **dict(model.serving.engine_kwargs)}


def check(model: ModelConfig) -> None:
    """Raises ConfigError (field and value named) for what SGLang or Ray's SGLangServer would refuse."""
    s = model.serving
    ek = dict(s.engine_kwargs)
    if s.device == "cpu":
        raise ConfigError(
            "invalid value 'cpu' for 'model.serving.device' with model.serving.engine=sglang: Ray Serve LLM's "
            "SGLangServer reserves tp_size GPUs per replica; serve CPU models with engine=vllm"
        )
    for key in FORBIDDEN:
        if key in ek:
            raise ConfigError(
                f"'model.serving.engine_kwargs.{key}' is not allowed: use model.serving.source / model.name"
            )
    live = _live_arg_names()
    known = live if live is not None else frozenset(recorded_args())
    where = "the installed sglang" if live is not None else f"sglang {SGLANG_VERSION} (recorded; not importable here)"
    for key in sorted(ek):
        if key not in known:
            hint = f"; sglang calls it {RENAMED[key]}" if key in RENAMED else ""
            raise ConfigError(f"unknown SGLang server argument {key!r} in 'model.serving.engine_kwargs' "
                              f"(not a ServerArgs field of {where}){hint}")
    for key, names in (("tool_call_parser", TOOL_PARSERS_0_5_23), ("reasoning_parser", REASONING_PARSERS_0_5_23)):
        value = ek.get(key)
        if value is not None and live is None and value not in names:
            raise ConfigError(f"invalid value {value!r} for 'model.serving.engine_kwargs.{key}': not a parser "
                              f"of {where} (e.g. {sorted(names)[:4]}...)")
    for key, (_, kind) in recorded_args().items():
        if kind == "true" and key in ek and not isinstance(ek[key], bool):
            raise ConfigError(
                f"invalid value {ek[key]!r} for 'model.serving.engine_kwargs.{key}': must be true or false")


def argv(kwargs: dict[str, Any]) -> list[str]:
    """The same arguments as ``sglang serve`` / ``python -m sglang.launch_server`` takes them
    (a store_true option set false is left out: false is its default)."""
    out: list[str] = []
    args = recorded_args()
    for key, value in kwargs.items():
        option, kind = args.get(key, ("--" + key.replace("_", "-"), "value"))
        if value is None or (kind == "true" and value is False):
            continue
        if kind == "none":
            raise ConfigError(
                f"'model.serving.engine_kwargs.{key}' has no command-line form in sglang {SGLANG_VERSION}")
        if kind == "true":
            out.append(option)
        elif kind == "list":
            out += [option, *(str(v) for v in (value if isinstance(value, (list, tuple)) else [value]))]
        else:
            out += [option, json.dumps(value) if isinstance(value, (dict, list)) else str(value)]
    return out
