"""The locally built tiny Qwen3 checkpoint: loadable files, parser-relevant tokens, chat template."""

from __future__ import annotations

import importlib
import json

import pytest

from farm.serve.tiny_model import ARCH, MARKERS, build_tiny_qwen3

# installed with the serving stack: skipped without it, a failure under FARM_REQUIRE_SERVE=1
pytestmark = pytest.mark.serve_stack("tokenizers", "safetensors", "transformers")


@pytest.fixture(scope="module")
def transformers():
    return importlib.import_module("transformers")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny") / "m")


def test_files_and_config(tiny, transformers):
    names = {p.name for p in tiny.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "chat_template.jinja", "generation_config.json"} <= names
    cfg = transformers.AutoConfig.from_pretrained(str(tiny))
    assert cfg.architectures == ["Qwen3ForCausalLM"] and cfg.num_hidden_layers == ARCH["layers"]
    tok = transformers.AutoTokenizer.from_pretrained(str(tiny))
    assert cfg.vocab_size >= len(tok) and cfg.vocab_size % 64 == 0
    assert tok.convert_ids_to_tokens(cfg.eos_token_id) == "<|im_end|>"
    from safetensors import safe_open

    with safe_open(str(tiny / "model.safetensors"), "np") as f:
        assert f.get_tensor("model.embed_tokens.weight").shape == (cfg.vocab_size, ARCH["hidden"])
        assert "lm_head.weight" not in f.keys()  # tied embeddings


def test_markers_are_single_non_special_tokens(tiny, transformers):
    tok = transformers.AutoTokenizer.from_pretrained(str(tiny))
    for marker in MARKERS:
        ids = tok.encode(marker, add_special_tokens=False)
        assert len(ids) == 1, marker
        # the parsers read them from decoded text, so skip_special_tokens must keep them
        assert tok.decode(ids, skip_special_tokens=True) == marker


def test_chat_template_renders_tools_calls_and_results(tiny, transformers):
    tok = transformers.AutoTokenizer.from_pretrained(str(tiny))
    tools = [{"type": "function", "function": {"name": "Bash", "description": "Run.", "parameters": {
        "type": "object", "properties": {"command": {"type": "string", "description": "the command"}}}}}]
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": "", "reasoning_content": "look first",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "Bash", "arguments": {"command": "ls"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "tool", "tool_call_id": "c2", "content": "b.py"},
    ]
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nbe brief\n")
    assert "<name>Bash</name>" in text and "<parameter><name>command</name><type>string</type>" in text
    assert "<think>\nlook first\n</think>" in text
    assert "<tool_call>\n<function=Bash>\n<parameter=command>\nls\n</parameter>\n</function>\n</tool_call>" in text
    # consecutive tool results share one user turn
    assert text.count("<|im_start|>user") == 2
    assert "<tool_response>\na.py\n</tool_response>\n<tool_response>\nb.py\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")
    off = tok.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_build_is_idempotent(tiny):
    stamp = (tiny / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_qwen3(tiny) == tiny
    assert (tiny / "model.safetensors").stat().st_mtime_ns == stamp
    json.loads((tiny / "config.json").read_text())
