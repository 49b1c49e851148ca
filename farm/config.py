"""Structured configuration: the schema (dataclasses), loading from conf/ and CLI overrides.

The dataclass defaults ARE the embedded defaults: ``farm run`` with no conf/ directory at all
still evaluates the bundled suite with the oracle policy. ``conf/farm.yaml`` mirrors them so
that a newcomer can read what the defaults are.

Command-line overrides follow the Hydra-like form people know:
``benchmark=builtin`` selects ``conf/benchmark/builtin.yaml`` for the ``benchmark`` node,
``experiment=demo`` overlays ``conf/experiment/demo.yaml`` at the root, and dotted keys
(``run.seeds=3``) set single values. Unknown keys and wrong types fail with a ConfigError
naming the key and the value.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from farm.errors import ConfigError
from farm.grade_config import GradeConfig, VerifierCacheConfig  # noqa: F401  (re-exported: part of the schema)
from farm.sandbox_config import (  # noqa: F401  (re-exported: part of the schema)
    CAPABILITY_PROFILES,
    DEFAULT_EGRESS_EXCEPT,
    DockerSandboxConfig,
    KubernetesSandboxConfig,
    LocalSandboxConfig,
    SandboxConfig,
)

# model.name of the embedded defaults: no model at all, the oracle policy answers
ORACLE_MODEL = "oracle"
NODE_GROUPS = ("benchmark", "sandbox", "store", "model", "agent")
ROOT_GROUPS = ("experiment",)


@dataclass
class BenchmarkConfig:
    name: str = "builtin"
    path: Optional[str] = None  # a directory of Harbor-format tasks (overrides the source)
    task_ids: List[str] = field(default_factory=list)
    limit: Optional[int] = None
    sample: Optional[int] = None  # a random subset of this many tasks (seeded by sample_seed)
    sample_seed: int = 0
    strict: bool = False  # a task that fails to load fails the command (default: reported, skipped)
    mirror: Optional[str] = None  # replaces the source's git URL: a bare repo, a checkout, or a URL
    cache_dir: Optional[str] = None  # null: $FARM_CACHE_DIR/sources, else ~/.cache/farm/sources
    # remove the task repository's history beyond HEAD before the agent starts (farm/grade/history.py);
    # null: only tasks graded by their git patch (their history may hold the fix)
    strip_history: Optional[bool] = None


@dataclass
class StoreConfig:
    uri: str = "./farm-results"
    endpoint_url: Optional[str] = None  # S3-compatible servers (SeaweedFS, MinIO, ...)
    region: Optional[str] = None
    batch_rows: int = 64
    flush_interval_s: float = 5.0


@dataclass
class ServingConfig:
    """How `farm serve` / `serve.enabled=true` deploys this model with Ray Serve LLM."""

    source: Optional[str] = None  # hub id or local path of the checkpoint
    engine_kwargs: Dict[str, Any] = field(default_factory=dict)
    accelerator_type: Optional[str] = None
    device: str = "gpu"  # gpu | cpu
    num_replicas: int = 1
    min_replicas: Optional[int] = None
    max_replicas: Optional[int] = None
    router: str = "PrefixCacheAffinityRouter"
    runtime_env: Dict[str, Any] = field(default_factory=dict)
    # Ray Serve LLM defaults both to 1e9 (no backpressure, queue autoscaling never fires); about
    # the engine's max_num_seqs and half of it are sensible starts.
    max_ongoing_requests: Optional[int] = None
    target_ongoing_requests: Optional[int] = None
    router_kwargs: Dict[str, Any] = field(default_factory=dict)
    deployment_config: Dict[str, Any] = field(default_factory=dict)  # raw Serve options, merged last
    synthesize: Optional[str] = None  # "tiny-qwen3": build a random-weight model at `source` if missing


@dataclass
class ModelConfig:
    name: str = "oracle"
    base_url: Optional[str] = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.6
    max_tokens_per_turn: Optional[int] = 8192
    timeout_s: float = 7200.0
    max_retries: int = 5
    parallel_tool_calls: bool = True
    extra_body: Dict[str, Any] = field(default_factory=dict)
    session_header: str = "X-Farm-Session"
    # the run's preflight sends one tiny chat completion with a tool and requires a parseable
    # tool call back; false only for models that cannot call tools (random weights: tiny-cpu)
    preflight_tool_call: bool = True
    serving: ServingConfig = field(default_factory=ServingConfig)


@dataclass
class AgentConfig:
    # auto means one thing: "leaf" when an endpoint is configured (model.base_url or
    # serve.enabled=true), else "oracle" -- and the oracle only while model.name is the default
    # "oracle": a model preset with no endpoint is a ConfigError naming the fix, never a silent
    # oracle run labelled with the preset's name. oracle / nop / scripted are local policy
    # endpoints (real HTTP servers) that the same Leaf loop talks to.
    name: str = "auto"  # auto | leaf | oracle | nop | scripted
    script: Optional[str] = None  # YAML/JSON file of assistant turns for `scripted`
    max_steps: int = 150
    max_context_tokens: int = 131072
    max_total_time_s: Optional[float] = None  # None: the task's agent timeout
    tool_execution: str = "sequential"  # sequential | concurrent
    concurrent_bash: bool = False
    keep_reasoning: bool = True
    system_prompt_file: Optional[str] = None
    tools_file: Optional[str] = None
    tokenizer: str = "qwen"  # chat_template | qwen | tiktoken | bytes (farm/agent/tokens.py)
    # None: the model's serving.source or name (chat_template) / qwen3.5-27b / o200k_base
    tokenizer_model: Optional[str] = None
    read_output_chars: int = 20000
    bash_output_chars: int = 30000
    glob_limit: int = 1000
    bash_timeout_s: float = 120.0
    truncation: str = "head"  # head (Leaf) | head_tail
    compat: str = "leaf-2609"  # whose tool rules: leaf-2609 | leaf-legacy | farm-safe (docs/agent.md)


@dataclass
class RunConfig:
    id: Optional[str] = None
    new: bool = False
    seeds: int = 1
    max_in_flight: int = 8
    max_attempts: int = 3
    retry_backoff_s: float = 1.0
    executor: str = "ray"  # ray | local
    ray_address: Optional[str] = None
    workers: int = 2  # Ray worker actors; each drives many trials concurrently
    # sandbox starts in progress at once per worker process: starting is CPU-bound (process
    # spawns, environment build), so a burst of hundreds only makes every start time out
    max_concurrent_starts: int = 16
    progress: bool = True
    # preflight before the first trial: endpoint (/v1/models + one chat completion with a
    # tool), store writable, sandbox backend usable; preflight_sandbox also starts one sandbox
    preflight: bool = True
    preflight_sandbox: bool = True
    preflight_timeout_s: float = 20.0
    # stop the run when this many trial attempts in a row end in the same infra_error class
    # (0: never); the trials it did not run stay unfinished and re-run on resume
    breaker_consecutive: int = 10


@dataclass
class ServeConfig:
    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 8000
    ready_timeout_s: float = 900.0
    app_name: str = "farm"
    num_cpus: Optional[int] = None  # logical CPUs of a Ray head that serving starts itself


@dataclass
class ArmConfig:
    name: str = "base"
    overrides: List[str] = field(default_factory=list)
    last_overrides: List[str] = field(default_factory=list)  # after experiment.per_benchmark


@dataclass
class ExperimentConfig:
    name: str = "default"
    arms: List[ArmConfig] = field(default_factory=list)
    # several benchmarks in one run (each a conf/benchmark/<name>.yaml or a source name);
    # empty: the single `benchmark` section
    benchmarks: List[str] = field(default_factory=list)
    per_benchmark: Dict[str, List[str]] = field(default_factory=dict)  # benchmark -> overrides: farm/budgets.py


@dataclass
class ReportConfig:
    claims_dir: Optional[str] = None
    bootstrap: int = 2000
    seed: int = 0
    incomplete_threshold: float = 0.05
    power: float = 0.8  # statistical planner: power of the MDD and seeds-needed answers
    power_delta_pts: float = 3.0  # the fixed alternative the planner sizes seeds for
    sinks: List[str] = field(default_factory=list)  # wandb | mlflow: trackers the report goes to (docs/export.md)


@dataclass
class FarmConfig:
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    grade: GradeConfig = field(default_factory=GradeConfig)
    run: RunConfig = field(default_factory=RunConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    report: ReportConfig = field(default_factory=ReportConfig)


REPORT_SINKS = ("wandb", "mlflow")  # farm/report/sinks.py
CHOICES: dict[str, tuple[str, ...]] = {
    "sandbox.backend": ("local", "kubernetes", "docker", "none"),
    "sandbox.local.public_network": ("isolated", "host"),
    "sandbox.kubernetes.capabilities": CAPABILITY_PROFILES,
    "sandbox.kubernetes.agent_network": (None, "public", "no-network"),
    "sandbox.kubernetes.verifier_network": (None, "public", "no-network"),
    "sandbox.docker.capabilities": CAPABILITY_PROFILES,
    "sandbox.docker.pull": ("missing", "always", "never"),
    "agent.name": ("auto", "leaf", "oracle", "nop", "scripted"),
    "agent.tool_execution": ("sequential", "concurrent"),
    "agent.tokenizer": ("chat_template", "qwen", "tiktoken", "bytes"),
    "agent.truncation": ("head", "head_tail"),
    "agent.compat": ("leaf-2609", "leaf-legacy", "farm-safe"),
    "grade.mode": ("in_place", "fresh", "both"),
    "sandbox.image_policy": ("pull", "build", "pull-or-build"),
    "run.executor": ("ray", "local"),
    "model.serving.device": ("gpu", "cpu"),
}
POSITIVE: tuple[str, ...] = (
    "run.seeds", "run.preflight_timeout_s", "run.max_in_flight", "run.max_attempts", "run.workers",
    "run.max_concurrent_starts", "agent.max_steps",
    "store.batch_rows", "model.timeout_s", "agent.bash_timeout_s",
    "sandbox.kubernetes.pod_start_timeout_s", "sandbox.kubernetes.pull_timeout_s",
)
NON_NEGATIVE: tuple[str, ...] = (
    "agent.max_context_tokens", "model.max_retries", "model.temperature", "run.retry_backoff_s",
    "benchmark.sample", "run.breaker_consecutive", "sandbox.kubernetes.unschedulable_grace_s",
    "sandbox.kubernetes.max_reconnects",
    "sandbox.docker.max_reconnects", "grade.verifier_retries",
)
# Optional numbers that, when set, must be > 0.
POSITIVE_IF_SET: tuple[str, ...] = ("agent.max_total_time_s", "sandbox.kubernetes.pod_lifetime_s",
    "sandbox.docker.image_min_free_gb", "sandbox.kubernetes.keepalive_s", "sandbox.kubernetes.reconnect_window_s")
# Optional factors that, when set, must be >= 1 (a limit below the request never schedules).
AT_LEAST_ONE_IF_SET: tuple[str, ...] = ("sandbox.kubernetes.cpu_limit_factor", "sandbox.docker.cpu_limit_factor")
# Strings that must not be empty.
NON_EMPTY: tuple[str, ...] = (
    "sandbox.kubernetes.namespace", "sandbox.kubernetes.toolbox_image", "sandbox.docker.engine",
    "sandbox.docker.toolbox_image",
)

# Settings that change how a run is executed but not what it measures; they are left out of
# the config hash so that resuming with more workers or another store is the same run.
NOT_HASHED = (
    "run.id", "run.new", "run.max_in_flight", "run.executor", "run.ray_address", "run.workers",
    "run.max_concurrent_starts", "run.preflight", "run.preflight_sandbox", "run.preflight_timeout_s",
    "run.breaker_consecutive", "model.preflight_tool_call",
    "run.progress", "run.max_attempts", "run.retry_backoff_s", "store",
    "benchmark.strict", "benchmark.mirror", "benchmark.cache_dir", "serve.host", "serve.port",
    "serve.ready_timeout_s", "serve.app_name", "serve.num_cpus", "report", "sandbox.local.root_dir",
    "sandbox.docker.image_min_free_gb",
)


def conf_dir() -> Path:
    """Where conf/ lives: $FARM_CONF_DIR, else the repository's conf/, else ./conf."""
    env = os.environ.get("FARM_CONF_DIR")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parent.parent / "conf"
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
    groups, dotted = _split_overrides(list(overrides or []))
    for group, name in groups:
        path = base / group / f"{name}.yaml"
        if not path.is_file():
            raise ConfigError(
                f"unknown {group} {name!r}: choose one of {_group_names(group, base)} "
                f"(files in {base / group})"
            )
        data = _load_yaml(path)
        cfg = _merge(cfg, data if group in ROOT_GROUPS else {group: data}, str(path))
    if config_file is not None:
        cfg = _merge(cfg, _load_yaml(Path(config_file)), str(config_file))
    for item in dotted:
        key, value = item.split("=", 1)
        try:
            parsed = OmegaConf.from_dotlist([item])
        except Exception:
            raise ConfigError(f"cannot parse override {item!r}") from None
        try:
            cfg = OmegaConf.merge(cfg, parsed)  # type: ignore[assignment]
        except OmegaConfBaseException as exc:
            name = type(exc).__name__
            if "Key" in name or "struct" in str(exc):
                raise ConfigError(f"unknown config key '{key}' (in override {item!r})") from None
            raise ConfigError(f"invalid value {value!r} for '{key}': {str(exc).splitlines()[0]}") from None
    try:
        obj: FarmConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        raise ConfigError(_explain(exc, "config")) from None
    _resolve_paths(obj, base)
    validate(obj)
    return obj


def _get(cfg: FarmConfig, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def validate(cfg: FarmConfig) -> None:
    for key, choices in CHOICES.items():
        value = _get(cfg, key)
        if value not in choices:
            raise ConfigError(f"invalid value {value!r} for '{key}': choose one of {list(choices)}")
    # (keys, whether a value is acceptable, what the error says it must be)
    rules = (
        (POSITIVE, lambda v: v is not None and v > 0, "must be > 0"),
        (NON_NEGATIVE, lambda v: v is None or v >= 0, "must be >= 0"),
        (POSITIVE_IF_SET, lambda v: v is None or v > 0, "must be > 0"),
        (AT_LEAST_ONE_IF_SET, lambda v: v is None or v >= 1, "must be >= 1 (or null: no CPU limit)"),
        (NON_EMPTY, lambda v: bool(str(v).strip()), "must not be empty"),
    )
    for keys, acceptable, must in rules:
        for key in keys:
            value = _get(cfg, key)
            if not acceptable(value):
                raise ConfigError(f"invalid value {value!r} for '{key}': {must}")
    if cfg.agent.name == "scripted" and not cfg.agent.script:
        raise ConfigError("agent.name='scripted' needs agent.script=<file of assistant turns>")
    if cfg.agent.name == "leaf" and not cfg.model.base_url and not cfg.serve.enabled:
        require_endpoint(cfg)
    names = [a.name for a in cfg.experiment.arms]
    if len(set(names)) != len(names):
        raise ConfigError(f"invalid value {names!r} for 'experiment.arms': arm names must be unique")
    from farm.budgets import check_per_trial  # it builds on this module
    check_per_trial(cfg)
    for sink in cfg.report.sinks:
        if sink not in REPORT_SINKS:
            raise ConfigError(f"invalid value {sink!r} in 'report.sinks': choose from {list(REPORT_SINKS)}")
    if cfg.store.uri.strip() == "":
        raise ConfigError("invalid value '' for 'store.uri': give a directory or s3://bucket/prefix")


def require_endpoint(cfg: FarmConfig) -> None:
    """A run (or `farm validate`) of a model needs an endpoint; only the default model.name
    ("oracle") falls back to the oracle policy. Not part of validate(): `farm serve` loads
    the same presets without one, being the endpoint.

    Raises:
        ConfigError: one line naming the model and the fix.
    """
    if cfg.agent.name in ("leaf", "auto") and not cfg.model.base_url and not cfg.serve.enabled \
            and (cfg.agent.name == "leaf" or cfg.model.name != ORACLE_MODEL):
        raise ConfigError(
            f"model {cfg.model.name!r} has no endpoint: pass model.base_url=<OpenAI-compatible URL> "
            "or serve.enabled=true (or agent=oracle|nop|scripted for a policy run)"
        )


def resolved_agent(cfg: FarmConfig) -> str:
    """The policy the run actually uses: ``auto`` is ``leaf`` with an endpoint, else ``oracle``
    (validate() has already refused a model preset without an endpoint)."""
    if cfg.agent.name != "auto":
        return cfg.agent.name
    return "leaf" if (cfg.model.base_url or cfg.serve.enabled) else "oracle"


def to_dict(cfg: FarmConfig) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]


def to_yaml(cfg: FarmConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def apply_overrides(cfg: FarmConfig, overrides: list[str], base_dir: Path | None = None) -> FarmConfig:
    """An arm's config: the run's config with the arm's overrides on top.

    Overrides are dotted keys (``model.parallel_tool_calls=false``) or group selections
    (``model=qwen3.5-4b``), exactly as on the command line.
    """
    base_path = base_dir or conf_dir()
    node = OmegaConf.structured(cfg)
    groups, dotted = _split_overrides(list(overrides))
    for group, name in groups:
        path = base_path / group / f"{name}.yaml"
        if not path.is_file():
            raise ConfigError(f"arm override: unknown {group} {name!r}: choose one of {_group_names(group, base_path)}")
        data = _load_yaml(path)
        node = _merge(node, data if group in ROOT_GROUPS else {group: data}, str(path))
    for item in dotted:
        key, value = item.split("=", 1)
        try:
            node = OmegaConf.merge(node, OmegaConf.from_dotlist([item]))
        except OmegaConfBaseException:
            raise ConfigError(f"arm override: unknown key or bad value {value!r} for '{key}'") from None
    obj: FarmConfig = OmegaConf.to_object(node)  # type: ignore[assignment]
    _resolve_paths(obj, base_path)
    validate(obj)
    return obj


def _resolve_paths(cfg: FarmConfig, base: Path) -> None:
    """Relative files named in conf/ presets (scripts, prompts) resolve against conf/ when
    they do not exist relative to the working directory."""
    for section, key in (("agent", "script"), ("agent", "system_prompt_file"), ("agent", "tools_file")):
        node = getattr(cfg, section)
        value = getattr(node, key)
        if value and not os.path.isabs(value) and not os.path.exists(value) and (base / value).exists():
            setattr(node, key, str(base / value))


def config_hash(cfg: FarmConfig) -> str:
    """Stable hash of what a run measures (execution-only settings excluded)."""
    data = to_dict(cfg)
    for dotted in NOT_HASHED:
        parts = dotted.split(".")
        node = data
        for part in parts[:-1]:
            node = node.get(part, {})
        node.pop(parts[-1], None)
    # only the chosen backend's section shapes the sandboxes: a Kubernetes setting does not
    # change what a local run measures
    sandbox = data.get("sandbox", {})
    for name in CHOICES["sandbox.backend"]:
        if name != sandbox.get("backend"):
            sandbox.pop(name, None)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
