"""SGLang as the second engine: the Ray Serve LLM config farm generates for it, checked against
SGLang's own argument parser where sglang is importable and against the table recorded from the
sglang 0.5.23 wheel everywhere (farm/serve/sglang_args_0_5_23.tsv; how it was made: its header).

SGLang does not run here: sglang 0.5.23 pins torch 2.14.1 and a CUDA kernel wheel (sglang-kernel),
and its CPU backend needs a kernel extension that only SGLang's source tree builds, which no
reachable registry ships. So no test serves a model with it; these check what it would be given.
"""

from __future__ import annotations

import pytest

from farm.config import config_hash, load_config
from farm.errors import ConfigError
from farm.serve import sglang
from farm.serve.app import check_serving, llm_config, serve_config

PRESET = "model=frognano-4b-sglang"
WHY_NOT_HERE = (
    "sglang is not importable here (it cannot be installed beside farm: sglang 0.5.23 pins torch 2.14.1 "
    "and the CUDA-only sglang-kernel wheel); the recorded 0.5.23 argument table is checked instead"
)


def _cfg(*extra: str):
    return load_config([PRESET, *extra])


def _sglang_parser():
    try:
        from sglang.srt.server_args import ServerArgs, prepare_server_args
    except Exception as exc:  # noqa: BLE001 - any import failure: skip, naming it
        pytest.skip(f"{WHY_NOT_HERE} ({type(exc).__name__}: {exc})")
    return ServerArgs, prepare_server_args


def test_the_preset_is_served_by_sglangs_own_server_with_the_vendors_parsers():
    cfg = _cfg()
    data = llm_config(cfg)
    assert data["server_cls"] == sglang.SERVER_CLS
    ek = data["engine_kwargs"]
    # Ray's SGLangServer does not read model_loading_config: farm names the weights and the id itself
    assert ek["model_path"] == data["model_loading_config"]["model_source"] == "microsoft/FrogNano-4B-2609"
    assert ek["served_model_name"] == data["model_loading_config"]["model_id"] == "frognano-4b-sglang"
    assert ek["tool_call_parser"] == "qwen3_coder" and ek["reasoning_parser"] == "qwen3"
    assert ek["mamba_radix_cache_strategy"] == "extra_buffer" and ek["enable_cache_report"] is True
    # SGLang's parsers only run behind its own OpenAI app, which direct streaming serves
    assert data["runtime_env"]["env_vars"][sglang.DIRECT_STREAMING_ENV] == "1"
    app = serve_config(cfg)["applications"][0]
    assert app["runtime_env"]["env_vars"][sglang.DIRECT_STREAMING_ENV] == "1"
    assert "callback_config" not in data  # the vLLM parser-plugin hook has no meaning here
    check_serving(cfg, check_port=False, check_files=False)


def test_vllm_presets_are_unchanged_by_the_engine_switch():
    cfg = load_config(["model=frognano-4b"])
    data = llm_config(cfg)
    assert cfg.model.serving.engine == "vllm"
    assert "server_cls" not in data and "model_path" not in data["engine_kwargs"]
    assert sglang.DIRECT_STREAMING_ENV not in data["runtime_env"]["env_vars"]
    # the default engine stays out of the hash (runs started before the key keep theirs); sglang enters it
    assert config_hash(load_config(["model=frognano-4b", "model.serving.engine=vllm"])) == config_hash(cfg)
    assert config_hash(load_config(["model=frognano-4b", "model.serving.engine=sglang"])) != config_hash(cfg)


@pytest.mark.serve_stack("ray.serve.llm")  # importing Ray Serve LLM starts a process
def test_ray_serve_llm_accepts_the_config_and_resolves_sglangs_server_class():
    from ray.serve.llm import LLMConfig

    config = LLMConfig(**llm_config(_cfg()))
    assert config.server_cls.__name__ == "SGLangServer"
    assert config.engine_kwargs["tool_call_parser"] == "qwen3_coder"


@pytest.mark.serve_stack("ray.serve.llm")
def test_build_app_refuses_sglang_without_direct_streaming(monkeypatch):
    from ray.llm._internal.serve import constants

    from farm.serve.app import build_app

    monkeypatch.setattr(constants, "RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING", False)
    with pytest.raises(ConfigError, match="RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING=1 before ray.llm is imported"):
        build_app(_cfg())


@pytest.mark.parametrize(("override", "message"), [
    # the strategy's older name (sgl-project/sglang#22935), which 0.5.23 rejects
    ("+model.serving.engine_kwargs.mamba_scheduler_strategy=extra_buffer",
     r"unknown SGLang server argument 'mamba_scheduler_strategy'.*sglang calls it mamba_radix_cache_strategy"),
    ("+model.serving.engine_kwargs.max_model_len=4096", r"'max_model_len'.*sglang calls it context_length"),
    ("model.serving.engine_kwargs.tool_call_parser=qwen3_xml",
     r"invalid value 'qwen3_xml' for 'model.serving.engine_kwargs.tool_call_parser'"),
    ("model.serving.engine_kwargs.reasoning_parser=deepseek_r1",
     r"invalid value 'deepseek_r1' for 'model.serving.engine_kwargs.reasoning_parser'"),
    ("model.serving.engine_kwargs.enable_cache_report=sometimes",
     r"invalid value 'sometimes' for 'model.serving.engine_kwargs.enable_cache_report': must be true or false"),
    ("+model.serving.engine_kwargs.model_path=/elsewhere", r"'model.serving.engine_kwargs.model_path' is not allowed"),
    ("model.serving.device=cpu", r"invalid value 'cpu' for 'model.serving.device' with model.serving.engine=sglang"),
])
def test_what_sglang_would_refuse_fails_at_check_time(monkeypatch, override, message):
    monkeypatch.setattr(sglang, "_live_arg_names", lambda: None)  # the recorded table, as on a laptop
    with pytest.raises(ConfigError, match=message):
        check_serving(_cfg(override), check_port=False, check_files=False)


def test_an_unknown_engine_is_refused_at_load():
    with pytest.raises(ConfigError, match=r"invalid value 'tgi' for 'model.serving.engine'"):
        load_config(["model.serving.engine=tgi"])


def test_generated_arguments_are_sglang_command_line_options():
    kwargs = llm_config(_cfg())["engine_kwargs"]
    args = sglang.argv(kwargs)
    assert args == [
        "--model-path", "microsoft/FrogNano-4B-2609", "--served-model-name", "frognano-4b-sglang",
        "--tp-size", "1", "--context-length", "131072", "--dtype", "bfloat16", "--max-running-requests", "256",
        "--tool-call-parser", "qwen3_coder", "--reasoning-parser", "qwen3",
        "--mamba-radix-cache-strategy", "extra_buffer", "--enable-cache-report",
        "--revision", "b90468c11a913c1916b4542b4b7a530ec42024a4",  # the preset's pin (a hub source)
    ]
    recorded_options = {opt for opt, _ in sglang.recorded_args().values()}
    assert {a for a in args if a.startswith("--")} <= recorded_options
    # a store_true option set false is its default: left out, not "--flag False"
    assert sglang.argv({"enable_cache_report": False, "disable_radix_cache": True}) == ["--disable-radix-cache"]


def test_the_recorded_table_is_what_the_sglang_wheel_says():
    args = sglang.recorded_args()
    assert len(args) == 546
    assert args["mamba_radix_cache_strategy"] == ("--mamba-radix-cache-strategy", "value")
    assert args["enable_cache_report"] == ("--enable-cache-report", "true")
    assert "mamba_scheduler_strategy" not in args
    ServerArgs, _ = _sglang_parser()
    import msgspec

    assert {f.name for f in msgspec.structs.fields(ServerArgs)} == set(args)


def test_sglangs_own_parser_accepts_the_generated_arguments():
    ServerArgs, prepare_server_args = _sglang_parser()
    kwargs = llm_config(_cfg())["engine_kwargs"]
    parsed = prepare_server_args(sglang.argv(kwargs))
    assert (parsed.tool_call_parser, parsed.reasoning_parser) == ("qwen3_coder", "qwen3")
    assert parsed.mamba_radix_cache_strategy == "extra_buffer" and parsed.enable_cache_report is True
    assert (parsed.context_length, parsed.max_running_requests, parsed.tp_size) == (131072, 256, 1)
    # what Ray's SGLangServer does with engine_kwargs (RayEngine -> ServerArgs(**kwargs))
    direct = ServerArgs(**kwargs)
    assert direct.model_path == "microsoft/FrogNano-4B-2609" and direct.served_model_name == "frognano-4b-sglang"
    # the flag name the issue quotes is not one this sglang accepts
    with pytest.raises(SystemExit):
        prepare_server_args([*sglang.argv(kwargs), "--mamba-scheduler-strategy", "extra_buffer"])
