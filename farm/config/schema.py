"""The config schema: FarmConfig and its sections, as dataclasses.

The dataclass defaults ARE the embedded defaults: ``farm run`` with no conf/ directory at all
still evaluates the bundled suite with the oracle policy. ``conf/farm.yaml`` mirrors them so
that a newcomer can read what the defaults are. OmegaConf builds its typed, closed nodes from
these classes (farm/config/load.py), which is why they keep ``typing.Optional``/``List``/``Dict``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from farm.config.grade import GradeConfig
from farm.config.sandbox import SandboxConfig

# experiment.strict_overrides by default: what makes an arm's strict twin strict
STRICT_OVERRIDES = (
    "benchmark.agent_network=no-network",
    "benchmark.verifier_network=no-network",
    "grade.mode=patch_both",
    "grade.tamper_fails=true",
    "benchmark.strip_history=true",
    "benchmark.seal_history=true",
)

# model.name of the embedded defaults: no model at all, the oracle policy answers
ORACLE_MODEL = "oracle"


@dataclass
class BenchmarkConfig:
    name: str = "builtin"
    path: Optional[str] = None  # a directory of Harbor-format tasks, or a SWE-bench rows file (overrides the source)
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
    # where history is stripped, also replace HEAD's own ancestry by one commit of HEAD's tree, on
    # tasks not graded by their patch and not about version control: a task image that committed
    # its answer and then removed it keeps the answer in HEAD's ancestry, which stripping keeps
    # (a patch-graded task's ancestry is the upstream's history before the base commit: kept)
    seal_history: bool = False
    # the network each task's agent / verifier gets (public | no-network); null: the task's own
    # setting (Leaf's registry gives SWE-bench and Terminal-Bench agents `public`): the strict
    # twin of an arm (experiment.strict_pair) sets both to no-network
    agent_network: Optional[str] = None
    verifier_network: Optional[str] = None
    # SWE-bench instance images (farm/sandbox/images/swebench/): repository mirrors named
    # <owner>+<name>, and CPython prefixes named by version (null: ~/.pyenv/versions)
    repos: Optional[str] = None
    pythons: Optional[str] = None
    # SWE-bench Pro rows (farm/tasks/swebench_pro/): a copy of scaleapi/SWE-bench_Pro-os (checkout,
    # bare clone or snapshot) holding run_scripts/<instance_id>/{run_script.sh,parser.py}
    pro_scripts: Optional[str] = None


@dataclass
class StoreConfig:
    uri: str = "./farm-results"
    endpoint_url: Optional[str] = None  # S3-compatible servers (SeaweedFS, MinIO, ...)
    region: Optional[str] = None
    batch_rows: int = 64
    flush_interval_s: float = 5.0
    # S3: how long one store operation is retried on throttling, 5xx, timeouts and resets
    # before the run stops (exit 6); and how long one request may take before it is retried
    retry_budget_s: float = 120.0
    request_timeout_s: float = 30.0


@dataclass
class ServingConfig:
    """How `farm serve` / `serve.enabled=true` deploys this model with Ray Serve LLM."""

    source: Optional[str] = None  # hub id or local path of the checkpoint
    # vllm | sglang: which engine Ray Serve LLM runs (farm/serve/sglang.py); engine_kwargs are
    # that engine's own argument names
    engine: str = "vllm"
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
    # The checkpoint pinned: a hub commit (passed to the engine as its `revision`) and the first
    # hex digits of model.safetensors' sha256. Rows record both, labelled as the preset's pin
    # (farm/run/serving_facts.py); null: not pinned, and the row says so by leaving them null.
    revision: Optional[str] = None
    weights_sha256_prefix: Optional[str] = None


@dataclass
class ModelConfig:
    name: str = ORACLE_MODEL
    base_url: Optional[str] = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.6
    max_tokens_per_turn: Optional[int] = 8192
    timeout_s: float = 7200.0
    max_retries: int = 5  # the SDK's own retries inside one request attempt
    # a transiently failed request (refused/reset, timeout, 5xx, 429) is sent again inside the
    # trial, same messages, with backoff for up to this many seconds before the trial is an
    # infra error (0: fail at once); a restarted model server costs a wait, not earlier turns
    request_retry_budget_s: float = 300.0
    # stream every request (time to first token, decode time); false: whole-body answers
    stream: bool = True
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
    name: str = "auto"  # auto | leaf | oracle | nop | scripted | predictions
    script: Optional[str] = None  # YAML/JSON file of assistant turns for `scripted`
    # a SWE-bench predictions file (JSONL, a JSON list, or a JSON object keyed by instance id)
    # for `predictions`: each instance's model_patch applied as the harness does, then graded
    predictions: Optional[str] = None
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
    # what the time budget counts: wall (the vendor's: everything) | agent (the model server's
    # reported queue time is credited back, so a busier cluster does not cut trials shorter)
    timeout_clock: str = "wall"
    # the agent's time budget (max_total_time_s, else the task's own agent timeout) times this:
    # Terminal-Bench results are reported with multiplied timeouts, and a 1x / 4x arm pair shows
    # whether a verdict depends on how fast the model was served (conf/experiment/tb2-timeouts.yaml).
    # The verifier's timeout is not multiplied: it times the tests, not the model.
    timeout_multiplier: float = 1.0


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
    # sandbox starts in progress at once across the whole run (one count shared by every Ray
    # worker, farm/run/starts.py): starting is CPU- and API-bound (process spawns, environment
    # builds, pods), so a burst of hundreds only makes every start time out
    max_concurrent_starts: int = 16
    progress: bool = True
    # where stdout is no terminal (`ray job submit` logs, CI, a file): a plain progress line this
    # often, and on every phase change (farm/run/progress.py)
    progress_interval_s: float = 30.0
    # preflight before the first trial: endpoint (/v1/models + one chat completion with a
    # tool), store writable, sandbox backend usable; preflight_sandbox also starts one sandbox
    preflight: bool = True
    preflight_sandbox: bool = True
    preflight_timeout_s: float = 20.0
    # stop the run when this many trial attempts in a row end in the same infra_error class
    # (0: never); the trials it did not run stay unfinished and re-run on resume
    breaker_consecutive: int = 10
    # the order trials start in (farm/run/order.py): dataset | longest_first (the tasks expected
    # to take longest first, so the long tail does not start last); execution only, not hashed
    order: str = "dataset"


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
    # the benchmarks (names as in experiment.benchmarks) this arm runs on; empty: every one of
    # the experiment's (farm/config/arms.py runs_on)
    benchmarks: List[str] = field(default_factory=list)
    # false: experiment.strict_pair makes no <arm>-strict twin of this arm
    strict: bool = True


@dataclass
class ExperimentConfig:
    name: str = "default"
    arms: List[ArmConfig] = field(default_factory=list)
    # several benchmarks in one run (each a conf/benchmark/<name>.yaml or a source name);
    # empty: the single `benchmark` section
    benchmarks: List[str] = field(default_factory=list)
    per_benchmark: Dict[str, List[str]] = field(default_factory=dict)  # benchmark -> overrides: farm/config/arms.py
    # run every arm twice: as configured (standard: the vendor's settings) and as ``<arm>-strict``
    # with strict_overrides on top (no agent egress, history stripped, fresh grading wherever a
    # patch is the answer, a tamper suspect fails); the report pairs them (farm/report/strict.py)
    strict_pair: bool = False
    strict_overrides: List[str] = field(default_factory=lambda: list(STRICT_OVERRIDES))


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


def value_at(cfg: Any, dotted: str) -> Any:
    """The value at ``a.b.c`` of a config (or of any section of it)."""
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node
