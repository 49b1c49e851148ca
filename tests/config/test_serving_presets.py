"""Issue 28 item 1: presets that say what they serve and ask the engine for the cache numbers."""

from __future__ import annotations

import pytest

from farm.config import conf_dir, load_config
from farm.errors import ConfigError

GPU_PRESETS = ("frognano-4b", "qwen3.5-4b", "gemma-4-12b")


def test_prefix_caching_without_token_details_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(["model=frognano-4b", "model.serving.engine_kwargs.enable_prompt_tokens_details=false"])
    msg = str(err.value)
    assert "enable_prompt_tokens_details" in msg and "enable_prefix_caching" in msg
    assert "\n" not in msg
    # the same preset with the key dropped altogether (an older preset file) is refused too
    with pytest.raises(ConfigError, match="enable_prompt_tokens_details=true"):
        load_config(["model=tiny-cpu", "model.serving.engine_kwargs.enable_prompt_tokens_details=null"])


def test_prefix_caching_off_needs_no_token_details() -> None:
    cfg = load_config(["model=frognano-4b", "model.serving.engine_kwargs.enable_prefix_caching=false",
                       "model.serving.engine_kwargs.enable_prompt_tokens_details=false"])
    assert cfg.model.serving.engine_kwargs["enable_prefix_caching"] is False


def test_every_preset_that_caches_asks_for_cached_tokens() -> None:
    for path in sorted((conf_dir() / "model").glob("*.yaml")):
        ek = load_config([f"model={path.stem}"]).model.serving.engine_kwargs
        if ek.get("enable_prefix_caching"):
            assert ek.get("enable_prompt_tokens_details") is True, path.stem


@pytest.mark.parametrize("preset", GPU_PRESETS)
def test_gpu_presets_skip_the_vision_tower(preset: str) -> None:
    assert load_config([f"model={preset}"]).model.serving.engine_kwargs["language_model_only"] is True


def test_frognano_pins_revision_and_weights() -> None:
    serving = load_config(["model=frognano-4b"]).model.serving
    assert serving.revision == "b90468c11a913c1916b4542b4b7a530ec42024a4"
    assert serving.weights_sha256_prefix == "4e5fb2d8"
    # no pin was found for these: null, not a guess
    for preset in ("qwen3.5-4b", "gemma-4-12b"):
        s = load_config([f"model={preset}"]).model.serving
        assert s.revision is None and s.weights_sha256_prefix is None


@pytest.mark.parametrize("override", ["model.serving.revision=main", "model.serving.weights_sha256_prefix=4e5f",
                                      "model.serving.weights_sha256_prefix=XYZXYZXY"])
def test_malformed_pins_are_refused(override: str) -> None:
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(["model=frognano-4b", override])


def test_revision_reaches_the_engine_for_hub_sources() -> None:
    from farm.serve.app import llm_config

    ek = llm_config(load_config(["model=frognano-4b"]))["engine_kwargs"]
    assert ek["revision"] == ek["tokenizer_revision"] == "b90468c11a913c1916b4542b4b7a530ec42024a4"
    assert "revision" not in llm_config(load_config(["model=qwen3.5-4b"]))["engine_kwargs"]
