"""What one agent run leaves behind: the messages, one record per model call, counters, exit.

Steps are emitted one by one (``on_step``) and stored as rows of the steps table, each carrying
only the messages it appended, so a trajectory is never rewritten whole (Leaf rewrites its JSON
after every step). Concatenating ``messages_json`` over a trial's steps gives the conversation.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from farm.store.schema import StepRow

# How an agent run ended: the closed set the loop produces (docs/agent.md, "Exit reasons").
# llm_query_error and tool_error are the infrastructure's failures (an infra_error row, retried);
# cancelled writes no row; model_error is the endpoint's garbage; the rest are graded.
ExitReason = Literal[
    "agent", "max_turns", "max_time", "max_context_len", "max_tokens_per_turn",
    "llm_query_error", "tool_error", "cancelled", "model_error",
]
EXIT_REASONS: tuple[ExitReason, ...] = get_args(ExitReason)


@dataclass
class ToolCallRecord:
    call_id: str
    name: str
    args_ok: bool  # the arguments parsed as a JSON object with the tool's required parameters
    duration_s: float = 0.0  # as seen by the loop (dispatch to observation)
    command_s: float | None = None  # Bash: the command's own run time inside the sandbox
    output_chars: int = 0
    truncated: bool = False
    error: str | None = None  # the tool's own error class (an observation), or None
    started: float = 0.0  # monotonic timestamps, to show overlap of concurrent calls
    ended: float = 0.0


@dataclass
class StepRecord:
    step: int  # 0-based model-call index
    latency_s: float | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    context_tokens: int | None = None
    n_tool_calls: int = 0  # calls the turn carried (executed or not)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    tool_s: float | None = None
    error: str | None = None
    ttft_s: float | None = None  # streamed requests: request sent -> first generated piece
    decode_s: float | None = None  # streamed requests: first generated piece -> end of stream
    queue_s: float | None = None  # the server's queue time, when it reports one
    request_attempts: int = 1  # requests sent for this model call (>1: retried in the trial)
    request_wait_s: float = 0.0  # seconds lost to failed requests before the one that answered
    messages: list[dict[str, Any]] = field(default_factory=list)  # what this step appended

    def to_row(self, run_id: str, trial_key: str, attempt: int) -> StepRow:
        return StepRow(
            run_id=run_id,
            trial_key=trial_key,
            attempt=attempt,
            step=self.step,
            latency_s=self.latency_s,
            finish_reason=self.finish_reason,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cached_tokens=self.cached_tokens,
            reasoning_tokens=self.reasoning_tokens,
            context_tokens=self.context_tokens,
            n_tool_calls=self.n_tool_calls,
            tool_names=[t.name for t in self.tool_calls],
            tool_durations_s=[t.duration_s for t in self.tool_calls],
            tool_output_chars=[t.output_chars for t in self.tool_calls],
            tool_s=self.tool_s,
            ttft_s=self.ttft_s,
            decode_s=self.decode_s,
            queue_s=self.queue_s,
            request_attempts=self.request_attempts,
            request_wait_s=self.request_wait_s,
            messages_json=json.dumps(self.messages, ensure_ascii=False, default=str),
        )


@dataclass
class Counters:
    steps: int = 0  # model calls made (failed ones included, as Leaf counts them)
    tool_calls: int = 0  # calls executed (each got an observation)
    tool_calling_turns: int = 0  # executed turns with >= 1 call
    parallel_call_turns: int = 0  # ... with >= 2 calls
    tool_parse_failures: int = 0  # unusable arguments (malformed, missing required) + raw tool-call markup in content
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    llm_s: float = 0.0
    tool_s: float = 0.0
    # the model's queue time as the server reported it (None: no step reported one), and the
    # rest of the model-call time: generating (prefill + decode) plus the network
    queue_s: float | None = None
    generation_s: float = 0.0

    @property
    def parallel_call_rate(self) -> float | None:
        """Leaf's "parallel tool-call rate": share of tool-calling turns with >= 2 calls."""
        return self.parallel_call_turns / self.tool_calling_turns if self.tool_calling_turns else None


@dataclass
class Trajectory:
    messages: list[dict[str, Any]]
    steps: list[StepRecord] = field(default_factory=list)
    # "unknown" only until the loop ends: run_agent always returns one of EXIT_REASONS
    exit_reason: ExitReason | Literal["unknown"] = "unknown"
    error: str | None = None
    final_message: str = ""
    context_tokens: int = 0
    counters: Counters = field(default_factory=Counters)
    reasoning_field: str | None = None  # "reasoning" (vLLM) | "reasoning_content" (SGLang)
    elapsed_s: float = 0.0
    # the class of the exception behind a tool_error (None otherwise): the trial decides on it,
    # not on the text of ``error``, whether the sandbox itself was lost
    tool_error_type: type[BaseException] | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["tool_error_type"]  # a class, not data: the JSON stays what it was
        data["counters"]["parallel_call_rate"] = self.counters.parallel_call_rate
        return data
