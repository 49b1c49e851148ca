"""Row types of the result store and their Arrow schemas.

``TrialResult`` is one finished attempt of one trial; ``StepRow`` is one model call of an
agent loop. The Arrow schemas are derived from the dataclasses so that a new column is added
in exactly one place; anything not known yet stays null.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

# Closed taxonomy: every trial ends in exactly one of these (docs/architecture.md "Trials, attempts, resume").
STATUSES = ("resolved", "unresolved", "model_error", "infra_error")


@dataclass
class TrialResult:
    # identity
    run_id: str
    trial_key: str
    benchmark: str
    task_id: str
    seed: int
    arm: str
    attempt: int
    # the model id the endpoint answered with (response.model); null when no answer came
    # back, so no row claims a model that did not answer. The configured name is model_preset.
    # policy=predictions: the file's model_name_or_path (the model wrote the patch; farm replays it)
    model: str | None
    # outcome
    status: str  # one of STATUSES
    reward: float | None = None
    error_class: str | None = None  # finer cause inside the status, e.g. "sandbox_start"
    error: str | None = None  # human-readable message for errors
    exit_reason: str | None = None
    grading_mode: str | None = None  # in_place | fresh
    # work
    steps: int | None = None
    tool_calls: int | None = None
    tool_calling_turns: int | None = None
    parallel_call_turns: int | None = None
    tool_parse_failures: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    context_tokens: int | None = None
    # time
    started_at: float | None = None  # unix seconds
    finished_at: float | None = None
    wall_s: float | None = None
    llm_s: float | None = None
    # llm_s split (farm/agent/loop.py): the server-reported queue time summed over the steps
    # (null when the server reported none) and the rest, generation and network
    queue_s_total: float | None = None
    generation_s_total: float | None = None
    tool_s: float | None = None
    # the agent's time budget in seconds (agent.max_total_time_s or the task's agent timeout,
    # times agent.timeout_multiplier) and that multiplier; null in rows written before they
    # existed (those ran at 1x) and for attempts that never reached the agent
    agent_budget_s: float | None = None
    timeout_multiplier: float | None = None
    verify_s: float | None = None
    verifier_runs: int | None = None  # runs of the verifier in this attempt (>1: verifier-only retries)
    sandbox_start_s: float | None = None
    # unix seconds the agent's sandbox start began, its run-wide start slot granted
    # (farm/run/starts.py): with sandbox_start_s, the interval the start held its slot
    sandbox_started_at: float | None = None
    sandbox_cpu_s: float | None = None
    api_calls_start: int | None = None
    api_calls_after_start: int | None = None
    # pid-namespace[+proc][+cgroup]: the agent's commands could not kill the sandbox agent (+cgroup:
    # nor starve it, their pids and memory limits below the sandbox's); none: <why>
    agent_isolation: str | None = None
    # the sandbox limits the agent's commands met during the attempt (memory, pids, disk), as the
    # backend's counters showed them (farm/sandbox/base.py LimitEvents); empty: none, or not known
    sandbox_limits: list[str] = field(default_factory=list)
    # a lost sandbox: whose it was (farm/run/attribution.py): agent (graded unresolved, exit reason
    # sandbox_oom / sandbox_pids / sandbox_disk) | infrastructure | unknown (retried like infrastructure)
    loss_cause: str | None = None
    # whose words the model saw (farm/agent/tools.py prompt_identity): farm | vendor (imported
    # with `farm leaf import`, unchanged) | custom; and the hashes of the prompt and tool list
    prompt_origin: str | None = None
    # agent.compat: whose tool rules where farm and the vendor differ (docs/agent.md):
    # leaf-2609 | leaf-legacy (the vendor's) | farm-safe (farm's own; a report marks it)
    agent_compat: str | None = None
    system_prompt_sha256: str | None = None
    tools_sha256: str | None = None
    # sha256 of the file that drives a farm policy (farm/run/rows.py): the scripted policy's
    # agent.script, the predictions policy's agent.predictions. A file changed under the same
    # path is another agent, which the config's path does not show (farm diff)
    agent_script_sha256: str | None = None
    # provenance
    policy: str | None = None  # oracle | nop | scripted | predictions (farm's local policies) | leaf (a model)
    model_preset: str | None = None  # model.name of the config (the preset): what was asked for
    endpoint: str | None = None  # host:port of the base URL the agent talked to
    endpoint_origin: str | None = None  # farm-policy | farm-serve | external
    image: str | None = None  # what ran: a build's own tag, else the pulled reference (mirror, lock)
    # how the image came to be (farm/sandbox/base.py ImageProvenance): scores on a stand-in base
    # or with allow_any_image are for testing the harness, never for comparison
    image_source: str | None = None  # pulled | built | cached | local | host
    image_id: str | None = None
    image_build_s: float | None = None
    # Kubernetes: seconds from the pod's Pulling event to its Pulled event (0.0: the image was
    # already on the node) and the node the pod ran on; null on backends without pulls or nodes
    image_pull_s: float | None = None
    sandbox_node: str | None = None
    base_image_standin: bool | None = None
    image_unfaithful: bool | None = None
    sandbox_backend: str | None = None
    agent_network: str | None = None
    verifier_network: str | None = None
    dataset_revision: str | None = None
    harness: str | None = None
    harness_version: str | None = None
    config_hash: str | None = None
    farm_version: str | None = None
    reasoning_field: str | None = None  # "reasoning" (vLLM) | "reasoning_content" (SGLang)
    # what served the model (farm/run/serving_facts.py): the checkpoint revision and pinned
    # weights-checksum prefix, the engine and its version, the cache mode in effect
    # (prefix | off [,mamba=<mode>]), and serving_origin saying where each value came from
    # ("engine=server served_revision=preset ..."); null: nobody stated it
    served_revision: str | None = None
    weights_sha256: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    cache_mode: str | None = None
    serving_origin: str | None = None
    patch_bytes: int | None = None
    # tamper-proofing (farm/grade/history.py, farm/grade/hack_scan.py)
    base_commit: str | None = None  # HEAD of the task repository when the agent started
    history_refs_removed: int | None = None  # null: history was not stripped (see benchmark.strip_history)
    history_objects_removed: int | None = None
    hack_flags: list[str] = field(default_factory=list)  # "<rule>@<step>" from the hack scan
    # grade.mode=both: the fresh verdict beside the in-place one (status); a trial resolved in
    # place but not from its patch alone is a tamper suspect
    fresh_status: str | None = None
    tamper_suspect: bool | None = None
    # farm regrade (farm/run/regrade.py): the attempt_uid this row re-graded and its verdict
    regraded_from: str | None = None
    original_status: str | None = None
    worker: str | None = None  # host/pid that ran the attempt
    # the Ray node id the attempt ran on (a worker_lost row: the node that was lost); null for
    # the local executor, and in rows written before the column existed
    ray_node: str | None = None
    # benchmark.seal_history: HEAD's own ancestry was squashed into one commit before the agent
    # started; null where history was not stripped, and in rows written before the column existed
    history_sealed: bool | None = None
    # unique per executed attempt: steps of an attempt that crashed before its trial row was
    # committed carry a uid no trial row has, so they can never be mixed into a later attempt
    attempt_uid: str | None = None


@dataclass
class StepRow:
    run_id: str
    trial_key: str
    attempt: int
    step: int
    attempt_uid: str | None = None
    latency_s: float | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    context_tokens: int | None = None
    n_tool_calls: int = 0
    tool_names: list[str] = field(default_factory=list)
    tool_durations_s: list[float] = field(default_factory=list)
    tool_output_chars: list[int] = field(default_factory=list)
    tool_s: float | None = None
    # streamed requests (model.stream): request sent -> first generated piece, and the rest of
    # the stream; queue_s when the server reports it; retries of this model call in the trial
    ttft_s: float | None = None
    decode_s: float | None = None
    queue_s: float | None = None
    request_attempts: int | None = None
    request_wait_s: float | None = None
    # JSON text of the messages this step appended (assistant message + tool messages), so a
    # trajectory is the concatenation of the steps and is never rewritten whole.
    messages_json: str = "[]"


_PRIMITIVE = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}


def _arrow_type(tp: Any) -> pa.DataType:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _arrow_type(args[0])
    if origin is list:
        (inner,) = typing.get_args(tp)
        return pa.list_(_arrow_type(inner))
    return _PRIMITIVE[tp]


def arrow_schema(cls: type) -> pa.Schema:
    hints = typing.get_type_hints(cls)
    return pa.schema(
        [pa.field(f.name, _arrow_type(hints[f.name])) for f in dataclasses.fields(cls)]
    )


TRIALS_SCHEMA = arrow_schema(TrialResult)
STEPS_SCHEMA = arrow_schema(StepRow)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _storable(value: Any) -> Any:
    """A lone surrogate (an undecodable byte of a file name, a model's "\\udcff") is no UTF-8
    and Parquet refuses it: it is stored as its escape ``\\uXXXX``, which inside
    ``messages_json`` is the JSON escape of the same character, so that column round-trips."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8") if _SURROGATE.search(value) else value
    if isinstance(value, list):
        return [_storable(v) for v in value]
    return value


def to_table(rows: list[Any], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(
        [{k: _storable(v) for k, v in dataclasses.asdict(r).items()} for r in rows], schema=schema
    )
