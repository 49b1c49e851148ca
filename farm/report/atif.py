"""Export a run's trajectories as ATIF documents (Agent Trajectory Interchange Format, Harbor RFC 0001).

One JSON document per trial (its latest attempt), built from the run's Parquet alone: the
steps table holds every message a model call appended (the first step also carries the system
prompt and the task instruction), the trials table the outcome and the totals.

Mapping (docs/export.md):
- each system / user message is an ATIF step of that source;
- each model call (a row of the steps table) is one ``agent`` step: the assistant's content,
  its reasoning (``reasoning`` or ``reasoning_content``, whichever the server sent), its tool
  calls (arguments as a JSON object; arguments that were not one keep their raw text in
  ``extra.raw_arguments`` beside ``{}``), the tool messages answering them as observation
  results, the call's tokens as ``metrics``, and farm's timing (``latency_s``, ``tool_s``, each
  call's ``duration_s``) in ``extra``;
- ``final_metrics`` carries the trial's token totals; the root ``extra`` carries the reward,
  the status and the whole trial row (``extra.farm_trial``), so nothing farm knows is dropped.

Trials that never reached the agent (a sandbox that did not start) have no step to export and
are listed, not written: ATIF requires at least one step.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.report.data import ReportInputError, RunData, latest_attempts

ATIF_VERSION = "ATIF-v1.7"  # nothing farm writes needs v1.8 (audio content); readers of 1.7 and 1.8 accept it
AGENT_NAME = "farm"


@dataclass
class ExportSummary:
    run_id: str
    out_dir: Path
    written: list[Path] = field(default_factory=list)
    without_steps: list[str] = field(default_factory=list)  # trial keys with nothing to export


def _json_safe(value: Any) -> Any:
    """NaN / inf are not JSON: ATIF readers would reject the document."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _present(**items: Any) -> dict[str, Any]:
    return {k: v for k, v in items.items() if v is not None}


def _arguments(raw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(arguments object, extra): ATIF needs an object; anything else keeps its raw text."""
    if isinstance(raw, dict):
        return raw, {}
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed, {}
    return {}, {"raw_arguments": raw}


def _tool_calls(message: dict[str, Any], row: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls") or []
    names = row.get("tool_names") or []
    durations = row.get("tool_durations_s") or []
    chars = row.get("tool_output_chars") or []
    # the steps row lists the executed calls in the order of the turn; a turn stopped before its
    # tools ran lists none, and then no call gets a duration rather than a wrong one
    aligned = len(names) == len(calls) and all(
        n == (c.get("function") or {}).get("name") for n, c in zip(names, calls))
    out = []
    for i, call in enumerate(calls):
        fn = call.get("function") or {}
        args, extra = _arguments(fn.get("arguments"))
        if aligned:
            extra.update(_present(duration_s=durations[i] if i < len(durations) else None,
                                  output_chars=chars[i] if i < len(chars) else None))
        if call.get("type") not in (None, "function"):
            extra["type"] = call["type"]
        tc: dict[str, Any] = {"tool_call_id": str(call.get("id") or f"call_{row.get('step')}_{i}"),
                              "function_name": str(fn.get("name") or ""), "arguments": args}
        if extra:
            tc["extra"] = extra
        out.append(tc)
    return out


def _agent_step(row: dict[str, Any], message: dict[str, Any] | None) -> dict[str, Any]:
    # no per-step model_name: every call of a trial went to the one model named in ``agent``
    step: dict[str, Any] = {"source": "agent", "message": "", "llm_call_count": 1}
    if message is not None:
        content = message.get("content")
        step["message"] = content if isinstance(content, str) else "" if content is None else json.dumps(content)
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if reasoning:
            step["reasoning_content"] = str(reasoning)
        calls = _tool_calls(message, row)
        if calls:
            step["tool_calls"] = calls
    metrics = _present(prompt_tokens=row.get("prompt_tokens"), completion_tokens=row.get("completion_tokens"),
                       cached_tokens=row.get("cached_tokens"))
    metric_extra = _present(reasoning_tokens=row.get("reasoning_tokens"), context_tokens=row.get("context_tokens"))
    if metric_extra:
        metrics["extra"] = metric_extra
    if metrics:
        step["metrics"] = metrics
    step["extra"] = _present(farm_step=row.get("step"), latency_s=row.get("latency_s"),
                             finish_reason=row.get("finish_reason"), tool_s=row.get("tool_s"),
                             n_tool_calls=row.get("n_tool_calls"))
    if message is None:
        step["extra"]["no_reply"] = True  # the model call failed or was cut off: no assistant message
    return step


def trajectory(trial: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ATIF document of one trial attempt from its trials row and its steps rows (any order);
    None when the attempt has no steps."""
    if not steps:
        return None
    model = trial.get("model") or trial.get("model_preset")
    out: list[dict[str, Any]] = []
    for row in sorted(steps, key=lambda r: r["step"]):
        try:
            messages = json.loads(row.get("messages_json") or "[]")
        except ValueError as exc:
            raise ReportInputError(f"steps table: trial {trial['trial_key']} step {row['step']}: "
                                   f"messages_json is not JSON ({exc})") from None
        agent: dict[str, Any] | None = None
        for msg in messages:
            role = msg.get("role")
            if role in ("system", "user") and agent is None:
                content = msg.get("content")
                out.append({"source": role, "message": content if isinstance(content, str) else json.dumps(content)})
            elif role == "assistant" and agent is None:
                agent = _agent_step(row, msg)
                out.append(agent)
            elif role == "tool" and agent is not None:
                content = msg.get("content")
                result = _present(source_call_id=msg.get("tool_call_id"),
                                  content=content if isinstance(content, str) or content is None
                                  else json.dumps(content))
                agent.setdefault("observation", {"results": []})["results"].append(result)
            else:
                raise ReportInputError(f"steps table: trial {trial['trial_key']} step {row['step']}: "
                                       f"unexpected message with role {role!r} at this place")
        if agent is None:
            out.append(_agent_step(row, None))
    doc = {
        "schema_version": ATIF_VERSION,
        "session_id": str(trial["trial_key"]),
        "trajectory_id": str(trial.get("attempt_uid") or f"{trial['trial_key']}-{trial['attempt']}"),
        "agent": {
            "name": AGENT_NAME,
            "version": str(trial.get("harness_version") or trial.get("farm_version") or "unknown"),
            **({"model_name": model} if model else {}),
            "extra": _present(harness=trial.get("harness"), policy=trial.get("policy"),
                              model_preset=trial.get("model_preset"), endpoint_origin=trial.get("endpoint_origin"),
                              reasoning_field=trial.get("reasoning_field")),
        },
        "steps": [{"step_id": i + 1, **s} for i, s in enumerate(out)],
        "final_metrics": {
            **_present(total_prompt_tokens=trial.get("prompt_tokens"),
                       total_completion_tokens=trial.get("completion_tokens"),
                       total_cached_tokens=trial.get("cached_tokens")),
            "total_steps": len(out),
            "extra": _present(model_calls=trial.get("steps"), tool_calls=trial.get("tool_calls"),
                              reasoning_tokens=trial.get("reasoning_tokens"),
                              context_tokens=trial.get("context_tokens"), wall_s=trial.get("wall_s"),
                              llm_s=trial.get("llm_s"), tool_s=trial.get("tool_s"),
                              verify_s=trial.get("verify_s")),
        },
        "notes": ("Exported by farm from the run's Parquet. total_steps counts ATIF steps (system, user and "
                  "one agent step per model call); extra.model_calls is farm's step count."),
        "extra": {"reward": trial.get("reward"), "status": trial.get("status"),
                  "exit_reason": trial.get("exit_reason"), "farm_trial": dict(trial)},
    }
    return _json_safe(doc)


def _steps_by_attempt(run: RunData) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Steps rows keyed by (trial_key, attempt_uid or attempt number)."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    if run.steps is None or run.steps.num_rows == 0:
        return out
    for row in run.steps.to_pylist():
        ident = row.get("attempt_uid") or f"#{row['attempt']}"
        out.setdefault((row["trial_key"], ident), []).append(row)
    return out


def trajectories(run: RunData) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(trial row, ATIF document or None) for the latest attempt of every trial of ``run``."""
    steps = _steps_by_attempt(run)
    for trial in sorted(latest_attempts(run.trials.to_pylist()),
                        key=lambda t: (t["benchmark"], t["task_id"], t["arm"], t["seed"])):
        ident = trial.get("attempt_uid")
        rows = steps.get((trial["trial_key"], ident), []) if ident else []
        if not rows:  # rows written before attempt_uid existed are matched by attempt number
            rows = steps.get((trial["trial_key"], f"#{trial['attempt']}"), [])
        yield trial, trajectory(trial, rows)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def file_name(trial: dict[str, Any]) -> str:
    """``<benchmark>__<task>__<arm>__seed<k>__<key8>.json``: readable, and unique by the trial key."""
    parts = [trial["benchmark"], trial["task_id"], trial["arm"], f"seed{trial['seed']}", str(trial["trial_key"])[:8]]
    return "__".join(_UNSAFE.sub("-", str(p)) for p in parts) + ".json"


def export_run(run: RunData, out_dir: Path) -> ExportSummary:
    """Write one ATIF document per trial of ``run`` into ``out_dir``, and ``index.jsonl`` listing them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = ExportSummary(run.run_id, out_dir)
    index = []
    for trial, doc in trajectories(run):
        entry = {k: trial.get(k) for k in ("trial_key", "benchmark", "task_id", "seed", "arm", "status", "reward")}
        if doc is None:
            summary.without_steps.append(str(trial["trial_key"]))
            index.append({**entry, "file": None})
            continue
        path = out_dir / file_name(trial)
        path.write_text(json.dumps(doc, ensure_ascii=False, indent=1, allow_nan=False) + "\n")
        summary.written.append(path)
        index.append({**entry, "file": path.name})
    (out_dir / "index.jsonl").write_text("".join(json.dumps(_json_safe(e)) + "\n" for e in index))
    return summary
