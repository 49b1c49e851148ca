"""A prefix-cache hit rate estimated from time to first token, independent of ``cached_tokens``.

The server's own counter can be absent or wrong (hybrid models report 0 while caching works,
vllm-ascend#16639; a preset may not ask for token details at all), so the cost table puts a
second, timing-based number beside it. docs/cache-estimate.md describes the method and its
limits; in short:

Each step of a conversation resends the previous prompt and answer plus what was appended since
(tool results). Split step k's prompt into ``new`` (tokens after the previous prompt and answer)
and ``reusable`` (the rest: what a prefix cache could hold). Prefill time is roughly linear in
the tokens actually computed, so with a fraction ``h`` of the reusable tokens served from cache

    ttft - queue = a + b * new + b * (1 - h) * reusable

A least-squares fit of ``ttft - queue = a + b*new + c*reusable`` over a group's streamed steps
gives ``h = 1 - c/b`` (clipped to [0, 1]); the estimated hit rate is ``h * Σreusable / Σprompt``,
the same ratio (cached ÷ prompt tokens) the server's counter gives.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

# fewer points than this, or prompts that barely vary, say nothing about a slope
MIN_STEPS = 8


def step_features(steps: Iterable[dict[str, Any]]) -> list[tuple[float, float, float]]:
    """(new tokens, reusable tokens, prefill seconds) per usable step of ONE attempt.

    A step is usable when it was streamed (``ttft_s``) and reported ``prompt_tokens``; reuse is
    counted from the previous step's prompt and completion, so a step after an unusable one
    counts its whole prompt as new (an underestimate, never an invented hit).
    """
    out = []
    prev_total: int | None = None
    for s in sorted(steps, key=lambda s: s["step"]):
        prompt, ttft = s.get("prompt_tokens"), s.get("ttft_s")
        if prompt is None or ttft is None:
            prev_total = None
            continue
        reusable = min(prompt, prev_total) if prev_total is not None else 0
        prefill = max(0.0, float(ttft) - float(s.get("queue_s") or 0.0))
        out.append((float(prompt - reusable), float(reusable), prefill))
        completion = s.get("completion_tokens")
        prev_total = prompt + completion if completion is not None else None
    return out


def ttft_hit_rate(features: list[tuple[float, float, float]]) -> float:
    """The estimated share of prompt tokens served from cache; NaN when the fit cannot say."""
    if len(features) < MIN_STEPS:
        return math.nan
    x = np.array([(1.0, new, reusable) for new, reusable, _ in features])
    y = np.array([t for *_, t in features])
    if np.linalg.matrix_rank(x) < 3:  # no variation in new or reusable tokens: slopes unidentified
        return math.nan
    (_, b, c), *_ = np.linalg.lstsq(x, y, rcond=None)
    if not b > 0:  # prefill time does not grow with computed tokens: timing too noisy to read
        return math.nan
    h = min(1.0, max(0.0, 1.0 - c / b))
    prompt = float(x[:, 1].sum() + x[:, 2].sum())
    return h * float(x[:, 2].sum()) / prompt if prompt else math.nan


def ttft_p50(features: list[tuple[float, float, float]]) -> float:
    """The median prefill seconds (time to first token less server queue) over usable steps."""
    return float(np.median([t for *_, t in features])) if features else math.nan
