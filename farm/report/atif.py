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

``export_store_run`` (``farm export``) streams the steps table: it reads it file by file in
record batches and writes each trial's document as soon as the last file holding its rows is
read, so memory stays at about one steps file (~64 trials, the batch writer's unit) whatever the
run's size. ``export_run`` does the same from a run already in memory (``RunData``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from farm.report.data import ReportInputError, RunData, latest_attempts
from farm.store.results import ResultStore
from farm.store.schema import STEPS_SCHEMA
from farm.view.data import file_schema, table_files

BATCH_ROWS = 1024  # steps rows per record batch of the streamed export
ATIF_VERSION = "ATIF-v1.7"  # nothing farm writes needs v1.8 (audio content); readers of 1.7 and 1.8 accept it
AGENT_NAME = "farm"


@dataclass
class ScanStats:
    """How the steps table was read: in batches, never all at once (a test reads these)."""

    files: int = 0
    batches: int = 0
    rows: int = 0  # step rows decoded (those of the exported attempts)
    peak_rows: int = 0  # the most step rows held at one time


@dataclass
class ExportSummary:
    run_id: str
    out_dir: Path
    written: list[Path] = field(default_factory=list)
    without_steps: list[str] = field(default_factory=list)  # trial keys with nothing to export
    scan: ScanStats = field(default_factory=ScanStats)  # the streamed export's reads (export_store_run)


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


def _order(trial: dict[str, Any]) -> tuple:
    return (trial["benchmark"], trial["task_id"], trial["arm"], trial["seed"])


def trajectories(run: RunData) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(trial row, ATIF document or None) for the latest attempt of every trial of ``run`` (in memory)."""
    steps = _steps_by_attempt(run)
    for trial in sorted(latest_attempts(run.trials.to_pylist()), key=_order):
        ident = trial.get("attempt_uid")
        rows = steps.get((trial["trial_key"], ident), []) if ident else []
        if not rows:  # rows written before attempt_uid existed are matched by attempt number
            rows = steps.get((trial["trial_key"], f"#{trial['attempt']}"), [])
        yield trial, trajectory(trial, rows)


def _belongs(row: dict[str, Any], trial: dict[str, Any] | None) -> bool:
    """A steps row is of ``trial``'s (latest) attempt: same number, and same attempt_uid where
    both have one (rows written before attempt_uid existed have none)."""
    if trial is None or row["attempt"] != trial["attempt"]:
        return False
    return not (row.get("attempt_uid") and trial.get("attempt_uid")) or row["attempt_uid"] == trial["attempt_uid"]


def stream_attempts(store: ResultStore, run_id: str, trials: list[dict[str, Any]], batch_rows: int = BATCH_ROWS,
                    stats: ScanStats | None = None) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(trial, its attempt's steps rows) for each of ``trials`` (latest attempts), reading the steps
    table file by file in record batches of ``batch_rows``: an attempt is handed on once the last
    file holding rows of its trial is read, so what is held at once is about one file's rows (the
    batch writer puts an attempt's steps in one file of ~64 trials), not the run's. Trials
    without steps come last, with []."""
    stats = stats if stats is not None else ScanStats()
    latest = {t["trial_key"]: t for t in trials}
    files = table_files(store, "steps", run_id)
    schema = file_schema(STEPS_SCHEMA)
    # pass 1, three columns: the last file holding rows of each trial
    last: dict[str, int] = {}
    for i, path in enumerate(files):
        keys = ds.dataset([path], filesystem=store.fs, format="parquet", schema=schema).to_table(
            columns=["trial_key"]).column("trial_key")
        for key in pc.unique(keys).to_pylist():
            last[key] = i
    ends: dict[int, list[str]] = {}
    for key, i in last.items():
        ends.setdefault(i, []).append(key)
    wanted = pa.array(sorted(latest), pa.string())
    pending: dict[str, list[dict[str, Any]]] = {}
    held = 0
    for i, path in enumerate(files):
        stats.files += 1
        scanner = ds.dataset([path], filesystem=store.fs, format="parquet", schema=schema).scanner(
            filter=pc.field("trial_key").isin(wanted), batch_size=batch_rows)
        for batch in scanner.to_batches():
            stats.batches += 1
            for row in batch.to_pylist():
                if _belongs(row, latest.get(row["trial_key"])):
                    pending.setdefault(row["trial_key"], []).append(row)
                    held += 1
                    stats.rows += 1
            stats.peak_rows = max(stats.peak_rows, held)
        for key in ends.get(i, []):
            rows = pending.pop(key, None)
            if rows is not None:
                held -= len(rows)
                yield latest[key], rows
    done = set(last)
    for trial in trials:
        if trial["trial_key"] not in done:
            yield trial, []


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def file_name(trial: dict[str, Any]) -> str:
    """``<benchmark>__<task>__<arm>__seed<k>__<key8>.json``: readable, and unique by the trial key."""
    parts = [trial["benchmark"], trial["task_id"], trial["arm"], f"seed{trial['seed']}", str(trial["trial_key"])[:8]]
    return "__".join(_UNSAFE.sub("-", str(p)) for p in parts) + ".json"


def _write(summary: ExportSummary, docs: Iterator[tuple[dict[str, Any], dict[str, Any] | None]]) -> ExportSummary:
    summary.out_dir.mkdir(parents=True, exist_ok=True)
    index = []
    for trial, doc in docs:
        entry = {k: trial.get(k) for k in ("trial_key", "benchmark", "task_id", "seed", "arm", "status", "reward")}
        if doc is None:
            summary.without_steps.append(str(trial["trial_key"]))
            index.append((_order(trial), {**entry, "file": None}))
            continue
        path = summary.out_dir / file_name(trial)
        path.write_text(json.dumps(doc, ensure_ascii=False, indent=1, allow_nan=False) + "\n")
        summary.written.append(path)
        index.append((_order(trial), {**entry, "file": path.name}))
    index.sort(key=lambda e: e[0])  # the report's order, whatever order the steps were read in
    (summary.out_dir / "index.jsonl").write_text("".join(json.dumps(_json_safe(e)) + "\n" for _, e in index))
    return summary


def export_run(run: RunData, out_dir: Path) -> ExportSummary:
    """Write one ATIF document per trial of ``run`` (read into memory) into ``out_dir``, and
    ``index.jsonl`` listing them."""
    return _write(ExportSummary(run.run_id, out_dir), trajectories(run))


def export_store_run(store: ResultStore, run_id: str, out_dir: Path, batch_rows: int = BATCH_ROWS) -> ExportSummary:
    """``export_run`` of a run in ``store``, its steps streamed (``stream_attempts``): memory
    stays at about one steps file however large the run.

    Raises:
        ReportInputError: the store holds no run ``run_id``, or a steps row is malformed.
    """
    if store.read_run_meta(run_id) is None:
        raise ReportInputError(f"run {run_id!r}: no run metadata in the store (unknown run id?)")
    trials = sorted(store.read_trials(run_id).to_pylist(), key=_order)  # latest attempts: one row per trial
    summary = ExportSummary(run_id, out_dir)
    pairs = stream_attempts(store, run_id, trials, batch_rows, summary.scan)
    return _write(summary, ((trial, trajectory(trial, rows)) for trial, rows in pairs))
