"""What a loaded config must satisfy: the tables of allowed values, ``validate`` (run by every
load and every arm's overrides), the endpoint rule and the policy ``agent=auto`` resolves to.

A bad value fails with a ConfigError naming the key and the value, at load time, whatever
backend or arm is chosen: a typo in a section that is not used today still fails.
"""

from __future__ import annotations

from farm.config.benchmarks import same_benchmark
from farm.config.sandbox import CAPABILITY_PROFILES
from farm.config.schema import ORACLE_MODEL, FarmConfig, value_at
from farm.errors import ConfigError

REPORT_SINKS = ("wandb", "mlflow")  # farm/report/sinks.py
CHOICES: dict[str, tuple[str, ...]] = {
    "sandbox.backend": ("local", "kubernetes", "docker", "none"),
    "sandbox.local.public_network": ("isolated", "host"),
    "sandbox.kubernetes.capabilities": CAPABILITY_PROFILES,
    "sandbox.kubernetes.agent_network": (None, "public", "no-network"),
    "sandbox.kubernetes.verifier_network": (None, "public", "no-network"),
    "sandbox.docker.capabilities": CAPABILITY_PROFILES,
    "sandbox.docker.pull": ("missing", "always", "never"),
    "agent.name": ("auto", "leaf", "oracle", "nop", "scripted", "predictions"),
    "agent.tool_execution": ("sequential", "concurrent"),
    "agent.tokenizer": ("chat_template", "qwen", "tiktoken", "bytes"),
    "agent.truncation": ("head", "head_tail"),
    "agent.compat": ("leaf-2609", "leaf-legacy", "farm-safe"),
    "grade.mode": ("in_place", "fresh", "both", "patch_both"),
    "benchmark.agent_network": (None, "public", "no-network"),
    "benchmark.verifier_network": (None, "public", "no-network"),
    "agent.timeout_clock": ("wall", "agent"),
    "sandbox.image_policy": ("pull", "build", "pull-or-build"),
    "run.executor": ("ray", "local"),
    "run.order": ("dataset", "longest_first"),
    "model.serving.device": ("gpu", "cpu"),
    "model.serving.engine": ("vllm", "sglang"),
}
POSITIVE: tuple[str, ...] = (
    "run.seeds", "run.preflight_timeout_s", "run.max_in_flight", "run.max_attempts", "run.workers",
    "run.max_concurrent_starts", "run.progress_interval_s", "agent.max_steps",
    "store.batch_rows", "store.retry_budget_s", "store.request_timeout_s", "model.timeout_s", "agent.bash_timeout_s",
    "agent.timeout_multiplier",
    "sandbox.kubernetes.pod_start_timeout_s", "sandbox.kubernetes.pull_timeout_s",
    "sandbox.docker.start_timeout_s",
)
NON_NEGATIVE: tuple[str, ...] = (
    "agent.max_context_tokens", "model.max_retries", "model.request_retry_budget_s", "model.temperature",
    "run.retry_backoff_s",
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


def validate(cfg: FarmConfig) -> None:
    """Raises ConfigError (one line: the key, the value, what it must be) for the first bad value."""
    for key, choices in CHOICES.items():
        value = value_at(cfg, key)
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
            value = value_at(cfg, key)
            if not acceptable(value):
                raise ConfigError(f"invalid value {value!r} for '{key}': {must}")
    if cfg.agent.name == "scripted" and not cfg.agent.script:
        raise ConfigError("agent.name='scripted' needs agent.script=<file of assistant turns>")
    if cfg.agent.name == "predictions" and not cfg.agent.predictions:
        raise ConfigError("agent.name='predictions' needs agent.predictions=<a SWE-bench predictions file>")
    if cfg.agent.name == "leaf":
        # agent=leaf without an endpoint fails at load; agent=auto only where a run starts,
        # since `farm serve` loads the model presets without one (it is the endpoint)
        require_endpoint(cfg)
    names = [a.name for a in cfg.experiment.arms]
    if len(set(names)) != len(names):
        raise ConfigError(f"invalid value {names!r} for 'experiment.arms': arm names must be unique")
    check_per_trial(cfg)
    check_cache_reporting(cfg)
    check_pro_scripts(cfg)
    for sink in cfg.report.sinks:
        if sink not in REPORT_SINKS:
            raise ConfigError(f"invalid value {sink!r} in 'report.sinks': choose from {list(REPORT_SINKS)}")
    if cfg.store.uri.strip() == "":
        raise ConfigError("invalid value '' for 'store.uri': give a directory or s3://bucket/prefix")


def require_endpoint(cfg: FarmConfig) -> None:
    """A run (or `farm validate`) of a model needs an endpoint; only the default model.name
    ("oracle") falls back to the oracle policy. Not part of validate() for ``agent=auto``:
    `farm serve` loads the same presets without one, being the endpoint.

    This is the one "has this config an endpoint" rule: validate() (explicit ``agent=leaf``),
    `farm run` and `farm validate` before anything loads, and the driver once per arm
    (farm/config/arms.py ``require_arm_endpoints``) all call it.

    Raises:
        ConfigError: one line naming the model and the fix.
    """
    if cfg.agent.name in ("leaf", "auto") and not cfg.model.base_url and not cfg.serve.enabled \
            and (cfg.agent.name == "leaf" or cfg.model.name != ORACLE_MODEL):
        raise ConfigError(
            f"model {cfg.model.name!r} has no endpoint: pass model.base_url=<OpenAI-compatible URL> "
            "or serve.enabled=true (or agent=oracle|nop|scripted|predictions for a policy run)"
        )


def resolved_agent(cfg: FarmConfig) -> str:
    """The policy the run actually uses: ``auto`` is ``leaf`` with an endpoint, else ``oracle``
    (require_endpoint has already refused a model preset without an endpoint)."""
    if cfg.agent.name != "auto":
        return cfg.agent.name
    return "leaf" if (cfg.model.base_url or cfg.serve.enabled) else "oracle"


def check_pro_scripts(cfg: FarmConfig) -> None:
    """Raises ConfigError for ``benchmark.pro_scripts`` on a run with no SWE-bench Pro benchmark:
    only Pro rows read it, so elsewhere it would be silently ignored."""
    known = cfg.experiment.benchmarks or [cfg.benchmark.name]
    if cfg.benchmark.pro_scripts and not any(same_benchmark(b, "swebench_pro") for b in known):
        raise ConfigError(f"invalid value {cfg.benchmark.pro_scripts!r} for 'benchmark.pro_scripts': read only "
                          f"with benchmark=swebench-pro (the run's benchmarks are {known})")


def check_per_trial(cfg: FarmConfig) -> None:
    """Raises ConfigError for a per-benchmark / last override that is not ``agent.*`` / ``model.*``
    (one run plans one set of seeds and attempts, so only the agent and the model may vary), and
    for a benchmark an arm is limited to (``experiment.arms[].benchmarks``) that the run lacks."""
    exp = cfg.experiment
    per_trial = [(f"experiment.per_benchmark.{b}", o) for b, items in exp.per_benchmark.items() for o in items]
    per_trial += [(f"experiment.arms[{a.name}].last_overrides", o) for a in exp.arms for o in a.last_overrides]
    known = exp.benchmarks or [cfg.benchmark.name]
    for bench in exp.per_benchmark:
        # a typo would silently leave that benchmark on the arm's budget
        if not any(same_benchmark(bench, k) for k in known):
            raise ConfigError(f"invalid key {bench!r} in 'experiment.per_benchmark': "
                              f"the run's benchmarks are {known}")
    for where, item in per_trial:
        if not item.startswith(("agent.", "model.")) or "=" not in item:
            raise ConfigError(f"invalid value {item!r} in '{where}': only agent.<key>=<value> / model.<key>=<value>")
    for arm in exp.arms:
        for bench in arm.benchmarks:
            # a typo would silently plan no trial of the arm on the benchmark meant
            if not any(same_benchmark(bench, k) for k in known):
                raise ConfigError(f"invalid value {bench!r} in 'experiment.arms[{arm.name}].benchmarks': "
                                  f"the run's benchmarks are {known}")


_HEX = frozenset("0123456789abcdef")


def check_cache_reporting(cfg: FarmConfig) -> None:
    """A served model with prefix caching on must ask the engine to report it: without
    ``enable_prompt_tokens_details`` vLLM sends no ``usage.prompt_tokens_details.cached_tokens``
    and every row's cache columns stay empty, so the cache the preset turns on cannot be seen.
    Also checks the checkpoint pin's spelling.

    Raises:
        ConfigError: one line naming the key to set (or the pin that is malformed).
    """
    serving = cfg.model.serving
    ek = serving.engine_kwargs
    if ek.get("enable_prefix_caching") is True and ek.get("enable_prompt_tokens_details") is not True:
        raise ConfigError(
            f"model {cfg.model.name!r}: 'model.serving.engine_kwargs.enable_prefix_caching' is true but "
            "'model.serving.engine_kwargs.enable_prompt_tokens_details' is not: the engine would report no "
            "cached tokens; set model.serving.engine_kwargs.enable_prompt_tokens_details=true"
        )
    rev = serving.revision
    if rev is not None and (len(rev) != 40 or not set(rev) <= _HEX):
        raise ConfigError(f"invalid value {rev!r} for 'model.serving.revision': a full 40-hex commit (or null)")
    prefix = serving.weights_sha256_prefix
    if prefix is not None and (not 8 <= len(prefix) <= 64 or not set(prefix) <= _HEX):
        raise ConfigError(
            f"invalid value {prefix!r} for 'model.serving.weights_sha256_prefix': "
            "8 to 64 lowercase hex digits (or null)"
        )
