"""Loading the config: conf/, YAML files, command-line and arm overrides, and the config hash.

Command-line overrides follow the Hydra-like form people know:
``benchmark=builtin`` selects ``conf/benchmark/builtin.yaml`` for the ``benchmark`` node,
``experiment=demo`` overlays ``conf/experiment/demo.yaml`` at the root, and dotted keys
(``run.seeds=3``) set single values. Unknown keys and wrong types fail with a ConfigError
naming the key and the value.

An arm's overrides (``experiment.arms[].overrides``, per-benchmark budgets) are the same
language applied to a loaded config; both go through ``_overlay``. Only the wording of their
errors differs (``_CommandLine`` / ``_ArmOverride``), kept as it was so that scripts and tests
matching the messages still match.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from farm.config.checks import CHOICES, validate
from farm.config.schema import STRICT_OVERRIDES, FarmConfig
from farm.errors import ConfigError

NODE_GROUPS = ("benchmark", "sandbox", "store", "model", "agent")
ROOT_GROUPS = ("experiment",)

# Settings that change how a run is executed but not what it measures; they are left out of
# the config hash so that resuming with more workers or another store is the same run.
NOT_HASHED = (
    "run.id", "run.new", "run.max_in_flight", "run.executor", "run.ray_address", "run.workers",
    "run.max_concurrent_starts", "run.preflight", "run.preflight_sandbox", "run.preflight_timeout_s",
    "run.breaker_consecutive", "run.order", "model.preflight_tool_call",
    "model.stream", "model.request_retry_budget_s",
    "run.progress", "run.progress_interval_s", "run.max_attempts", "run.retry_backoff_s", "store",
    "benchmark.strict", "benchmark.mirror", "benchmark.cache_dir", "benchmark.repos", "benchmark.pythons",
    "benchmark.pro_scripts",
    "serve.host", "serve.port",
    "serve.ready_timeout_s", "serve.app_name", "serve.num_cpus", "report", "sandbox.local.root_dir",
    "sandbox.docker.image_min_free_gb", "sandbox.docker.start_timeout_s", "sandbox.docker.share_toolbox",
)

# Settings added after runs already existed that DO change what a run measures: they enter the
# hash only when set away from their default, so that a run started before the key existed (and
# measured exactly what the default measures) keeps its hash and stays resumable. A module that
# adds such a key registers it here with its default.
HASHED_UNLESS_DEFAULT: dict[str, Any] = {
    # standard and strict in one run (farm/config/arms.py strict twins)
    "benchmark.agent_network": None,
    "benchmark.verifier_network": None,
    "grade.tamper_fails": False,
    "benchmark.seal_history": False,  # farm/grade/history.py: what the agent can read of the history
    "experiment.strict_pair": False,
    "experiment.strict_overrides": list(STRICT_OVERRIDES),
    "agent.timeout_clock": "wall",  # farm/agent/loop.py: queue time credited back under "agent"
    "agent.timeout_multiplier": 1.0,  # farm/agent/loop.py time_budget_s: a longer budget measures another thing
    "agent.predictions": None,  # agent=predictions: which file's patches are graded
    # the checkpoint pin (a preset that sets it measures a pinned checkpoint, said in its hash)
    "model.serving.revision": None,
    "model.serving.weights_sha256_prefix": None,
    "model.serving.engine": "vllm",  # farm/serve/sglang.py: the engine's parsers and defaults move scores
    # which trials a run has (farm/config/arms.py runs_on, strict twins), like the arms list
    # itself: a resume with another restriction would run trials its stored plan lacks, so it
    # must hash differently; ``[]`` is every element of the list
    "experiment.arms[].benchmarks": [],
    "experiment.arms[].strict": True,
}


def conf_dir() -> Path:
    """Where conf/ lives: $FARM_CONF_DIR, else the repository's conf/, else ./conf."""
    env = os.environ.get("FARM_CONF_DIR")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2] / "conf"  # farm/config/load.py -> the repository
    if repo.is_dir():
        return repo
    return Path.cwd() / "conf"


def _group_names(group: str, base: Path) -> list[str]:
    d = base / group
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def _load_yaml(path: Path) -> DictConfig:
    try:
        cfg = OmegaConf.load(path)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except Exception as exc:  # yaml.YAMLError and friends: report the file, not the parser stack
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"{path}: must be a YAML mapping, got {type(cfg).__name__}")
    return cfg


def _merge(base: DictConfig, other: Any, origin: str) -> DictConfig:
    try:
        return OmegaConf.merge(base, other)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise ConfigError(_explain(exc, origin)) from None


def _explain(exc: OmegaConfBaseException, origin: str) -> str:
    key = getattr(exc, "full_key", None) or ""
    msg = str(exc).splitlines()[0]
    if "Key" in type(exc).__name__ or "not in struct" in msg:
        return f"{origin}: unknown config key '{key}'"
    value = getattr(exc, "value", None) if hasattr(exc, "value") else None
    if value is not None:
        return f"{origin}: invalid value {value!r} for '{key}': {msg}"
    return f"{origin}: invalid config at '{key}': {msg}"


def _split_overrides(overrides: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    groups, dotted = [], []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value")
        key, value = item.split("=", 1)
        key = key.strip()
        if key.lstrip("+") in NODE_GROUPS + ROOT_GROUPS and not value.startswith(("{", "[")):
            groups.append((key.lstrip("+"), value.strip()))
        else:
            dotted.append(f"{key.lstrip('+')}={value}")
    return groups, dotted


class _CommandLine:
    """How ``load_config`` words an override it cannot apply."""

    def unknown_group(self, group: str, name: str, base: Path) -> str:
        return f"unknown {group} {name!r}: choose one of {_group_names(group, base)} (files in {base / group})"

    def parse(self, item: str) -> DictConfig:
        try:
            return OmegaConf.from_dotlist([item])
        except Exception:
            raise ConfigError(f"cannot parse override {item!r}") from None

    def bad_dotted(self, item: str, key: str, value: str, exc: OmegaConfBaseException) -> str:
        if "Key" in type(exc).__name__ or "struct" in str(exc):
            return f"unknown config key '{key}' (in override {item!r})"
        return f"invalid value {value!r} for '{key}': {str(exc).splitlines()[0]}"

    def to_object(self, node: DictConfig) -> FarmConfig:
        try:
            return OmegaConf.to_object(node)  # type: ignore[return-value]
        except OmegaConfBaseException as exc:
            raise ConfigError(_explain(exc, "config")) from None


class _ArmOverride(_CommandLine):
    """How ``apply_overrides`` words one: prefixed ``arm override:``, one message per dotted key."""

    def unknown_group(self, group: str, name: str, base: Path) -> str:
        return f"arm override: unknown {group} {name!r}: choose one of {_group_names(group, base)}"

    def parse(self, item: str) -> DictConfig:
        # an OmegaConf parse error reads as a bad dotted key; anything else is not caught
        try:
            return OmegaConf.from_dotlist([item])
        except OmegaConfBaseException as exc:
            key, value = item.split("=", 1)
            raise ConfigError(self.bad_dotted(item, key, value, exc)) from None

    def bad_dotted(self, item: str, key: str, value: str, exc: OmegaConfBaseException) -> str:
        return f"arm override: unknown key or bad value {value!r} for '{key}'"

    def to_object(self, node: DictConfig) -> FarmConfig:
        return OmegaConf.to_object(node)  # type: ignore[return-value]


def _overlay(
    node: DictConfig,
    overrides: list[str],
    base: Path,
    wording: _CommandLine,
    config_file: str | Path | None = None,
) -> FarmConfig:
    """The one override path: group selections <- the config file <- dotted keys on top of
    ``node``, then paths resolved and the result validated."""
    groups, dotted = _split_overrides(list(overrides))
    for group, name in groups:
        path = base / group / f"{name}.yaml"
        if not path.is_file():
            raise ConfigError(wording.unknown_group(group, name, base))
        data = _load_yaml(path)
        node = _merge(node, data if group in ROOT_GROUPS else {group: data}, str(path))
    if config_file is not None:
        node = _merge(node, _load_yaml(Path(config_file)), str(config_file))
    for item in dotted:
        key, value = item.split("=", 1)
        parsed = wording.parse(item)
        try:
            node = OmegaConf.merge(node, parsed)  # type: ignore[assignment]
        except OmegaConfBaseException as exc:
            raise ConfigError(wording.bad_dotted(item, key, value, exc)) from None
    obj = wording.to_object(node)
    _resolve_paths(obj, base)
    validate(obj)
    return obj


def load_config(
    overrides: list[str] | None = None,
    config_file: str | Path | None = None,
    base_dir: Path | None = None,
) -> FarmConfig:
    """Build the validated config: defaults <- conf/farm.yaml <- groups <- file <- dotted keys."""
    base = base_dir or conf_dir()
    # Dataclass nodes are closed (unknown keys fail); Dict[str, Any] nodes stay open.
    cfg: DictConfig = OmegaConf.structured(FarmConfig)
    main = base / "farm.yaml"
    if main.is_file():
        cfg = _merge(cfg, _load_yaml(main), str(main))
    return _overlay(cfg, list(overrides or []), base, _CommandLine(), config_file)


def apply_overrides(cfg: FarmConfig, overrides: list[str], base_dir: Path | None = None) -> FarmConfig:
    """An arm's config: the run's config with the arm's overrides on top.

    Overrides are dotted keys (``model.parallel_tool_calls=false``) or group selections
    (``model=qwen3.5-4b``), exactly as on the command line.
    """
    return _overlay(OmegaConf.structured(cfg), overrides, base_dir or conf_dir(), _ArmOverride())


def _resolve_paths(cfg: FarmConfig, base: Path) -> None:
    """Relative files named in conf/ presets (scripts, prompts) resolve against conf/ when
    they do not exist relative to the working directory."""
    for section, key in (("agent", "script"), ("agent", "system_prompt_file"), ("agent", "tools_file")):
        node = getattr(cfg, section)
        value = getattr(node, key)
        if value and not os.path.isabs(value) and not os.path.exists(value) and (base / value).exists():
            setattr(node, key, str(base / value))


def to_dict(cfg: FarmConfig) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]


def to_yaml(cfg: FarmConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def _parents(data: dict[str, Any], parts: list[str]) -> list[dict[str, Any]]:
    """The mappings a dotted key's parent path names in ``data``; ``name[]`` steps into every
    element of the list ``name``."""
    nodes: list[Any] = [data]
    for part in parts:
        key, each = (part[:-2], True) if part.endswith("[]") else (part, False)
        nxt = [n.get(key, [] if each else {}) for n in nodes]
        nodes = [e for items in nxt for e in items] if each else nxt
    return [n for n in nodes if isinstance(n, dict)]


def config_hash(cfg: FarmConfig) -> str:
    """Stable hash of what a run measures (execution-only settings excluded)."""
    data = to_dict(cfg)
    for dotted in NOT_HASHED:
        parts = dotted.split(".")
        node = data
        for part in parts[:-1]:
            node = node.get(part, {})
        node.pop(parts[-1], None)
    for dotted, default in HASHED_UNLESS_DEFAULT.items():
        for node in _parents(data, dotted.split(".")[:-1]):
            last = dotted.rsplit(".", 1)[-1]
            if last in node and node[last] == default:
                node.pop(last)
    # only the chosen backend's section shapes the sandboxes: a Kubernetes setting does not
    # change what a local run measures
    sandbox = data.get("sandbox", {})
    for name in CHOICES["sandbox.backend"]:
        if name != sandbox.get("backend"):
            sandbox.pop(name, None)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
