"""Preflight: does the endpoint honour the per-turn token cap the agent sends?

farm sends ``max_completion_tokens`` (the OpenAI field; farm/agent/llm.py). Some
OpenAI-compatible servers read only the older ``max_tokens`` and silently drop the other one
(llama-cpp-python's server does), so ``model.max_tokens_per_turn`` would not bound a turn and a
looping model would run to the context limit. One short completion with a small cap tells: a
reply longer than the cap means the field was ignored. The check then asks again with
``max_tokens`` as well; if that is honoured, the run is refused with the override that fixes it
(``model.extra_body.max_tokens=<cap>``), so that the rows never carry a cap that was not applied.
"""

from __future__ import annotations

from typing import Any

import openai

from farm.config import ModelConfig

PROBE_CAP = 8
PROBE_PROMPT = "Write the whole numbers from 1 to 300, separated by single spaces, and nothing else."


async def _completion_tokens(client: openai.AsyncOpenAI, model: ModelConfig, fields: dict[str, Any],
                             timeout_s: float) -> int | None:
    extra = {k: v for k, v in (model.extra_body or {}).items() if k not in ("max_tokens", "max_completion_tokens")}
    body = {**extra, **fields}
    resp = await client.with_options(timeout=timeout_s).chat.completions.create(
        model=model.name, messages=[{"role": "user", "content": PROBE_PROMPT}],
        temperature=0.0, extra_body=body,
    )
    usage = getattr(resp, "usage", None)
    return getattr(usage, "completion_tokens", None)


async def turn_cap_problem(client: openai.AsyncOpenAI, model: ModelConfig, *, timeout_s: float) -> str | None:
    """None when the cap is honoured (or cannot be judged: no usage, or a reply shorter than the
    cap); else one line naming what the server ignored and the override that fixes it."""
    if not model.max_tokens_per_turn:
        return None
    own = model.extra_body or {}
    # what the agent sends: max_completion_tokens, plus whatever extra_body adds (it may add max_tokens)
    sent = {"max_completion_tokens": PROBE_CAP, **({"max_tokens": PROBE_CAP} if "max_tokens" in own else {})}
    got = await _completion_tokens(client, model, sent, timeout_s)
    if got is None or got <= PROBE_CAP:
        return None
    fields = " and ".join(sorted(sent))
    if "max_tokens" not in sent:
        both = await _completion_tokens(client, model, {**sent, "max_tokens": PROBE_CAP}, timeout_s)
        if both is not None and both <= PROBE_CAP:
            return (f"the server ignores max_completion_tokens (asked for {PROBE_CAP} tokens, it wrote {got}) "
                    f"but honours max_tokens: add model.extra_body.max_tokens={model.max_tokens_per_turn} "
                    "so that model.max_tokens_per_turn bounds each turn")
    return (f"the server ignores the per-turn cap ({fields}={PROBE_CAP}: it wrote {got} tokens); "
            "model.max_tokens_per_turn would not bound a turn")
