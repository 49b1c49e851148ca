"""Context accounting never downloads (issue 13 item 4): with every socket connect failing, a
tokenizer that is not on this machine is skipped without a connection attempt, and the model's
own tokenizer counts with its chat template when it is there."""

from __future__ import annotations

import json
import socket

import pytest

from farm.agent import tokens
from farm.agent.tokens import TokenCounter

MSGS = [{"role": "tool", "tool_call_id": "c1", "content": "hello world exit code"}]


@pytest.fixture
def network_off(monkeypatch, tmp_path):
    """Every connect fails and is recorded; empty caches; a fresh tokenizer cache per test."""
    attempts: list[object] = []

    def refuse(self, address, *a, **kw):
        attempts.append(address)
        raise OSError(f"network is off in this test ({address})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **kw: refuse(None, address))
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **kw: refuse(None, host))  # a lookup is an attempt
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    monkeypatch.setattr(tokens, "_encoders", {})
    return attempts


def test_tiktoken_without_its_vocabulary_falls_back_without_fetching(network_off, tmp_path):
    counter = TokenCounter("tiktoken")
    assert counter.backend == "bytes"
    assert network_off == [] and not (tmp_path / "tiktoken-cache").exists()
    assert counter.count_messages(MSGS) == -(-len(json.dumps(MSGS, separators=(",", ":")).encode()) // 4)


def test_a_hub_tokenizer_not_on_this_machine_is_skipped(network_off):
    counter = TokenCounter("chat_template", "example-org/no-such-model-here")
    assert counter.backend == "qwen:qwen3.5-27b"  # the next entry, offline by construction
    assert network_off == []


@pytest.mark.slow  # importing transformers takes 5-30 s
def test_the_models_own_tokenizer_counts_with_its_chat_template(network_off, tmp_path):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate("[UNK] <tool> hello world exit code".split())}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]")
    fast.chat_template = "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}"
    fast.save_pretrained(tmp_path / "model")
    counter = TokenCounter("chat_template", str(tmp_path / "model"))
    assert counter.backend == f"chat_template:{tmp_path / 'model'}"
    # the template renders "<tool> hello world exit code ": '<' 'tool' '>' (Whitespace splits the
    # punctuation off) and the four words, 7 tokens; the compact JSON would count more
    assert counter.count_messages(MSGS) == len(fast.apply_chat_template(MSGS, tokenize=True)["input_ids"]) == 7
    assert counter.count_text("hello world") == 2
    # a list the template cannot render is counted as its compact JSON (Leaf's fallback)
    fast.chat_template = "{{ raise_exception('no') }}"
    fast.save_pretrained(tmp_path / "broken")
    broken = TokenCounter("chat_template", str(tmp_path / "broken"))
    assert broken.count_messages(MSGS) == broken.count_text(json.dumps(MSGS, separators=(",", ":")))
    assert network_off == []
