"""Running one turn's tool calls in the sandbox: in order (Leaf) or concurrently (the ablation).

Concurrent mode starts every call at once, but a call first waits for each EARLIER call of the
same turn it conflicts with, so the result is always one the sequential order could produce:

* Read / Glob never conflict with each other (read-only).
* Write / Edit conflict with any earlier call on the same path (a per-path order, so two Edits
  of one file both land); a Write also conflicts with an earlier Glob and vice versa, since it
  may create a file the Glob would list.
* Bash is a barrier: it waits for everything before it and everything after waits for it,
  unless ``agent.concurrent_bash`` declares commands free of side effects.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
import time
from dataclasses import dataclass
from typing import Any

from farm.agent.tools import READ_ONLY, missing_required
from farm.agent.trajectory import ToolCallRecord
from farm.config import AgentConfig
from farm.sandbox.base import Sandbox, ToolRequest
from farm.sandbox.inside.leaf_tools import TOOL_NAMES, VENDOR_UMASK


@dataclass
class ToolCall:
    call_id: str
    name: str
    args: dict[str, Any]
    args_ok: bool

    @classmethod
    def from_openai(cls, tc: dict[str, Any]) -> ToolCall:
        """Leaf's rule: arguments that are not a JSON object become {} (the tool then complains).

        ``args_ok`` is false for malformed JSON, a non-object, or a default tool's call that
        lacks a required parameter: the arguments are passed on unchanged either way."""
        fn = tc["function"]
        try:
            args = json.loads(fn["arguments"]) if fn["arguments"] else {}
        except ValueError:
            args = None
        ok = isinstance(args, dict)
        args = args if ok else {}
        return cls(tc["id"], fn["name"], args, ok and not missing_required(fn["name"], args))


@dataclass
class ToolOutcome:
    call: ToolCall
    record: ToolCallRecord
    observation: str | None = None
    failure: str | None = None  # infrastructure failure ("Type: message"): ends with tool_error
    failure_type: type[BaseException] | None = None  # the exception behind ``failure``, when one was raised


def vendor_harness_refuses(call: ToolCall, workdir: str = "/") -> str | None:
    """The vendor's harness parses a Bash timeout itself before its runner starts, and a value
    it cannot parse fails the attempt (tool_error, retried) instead of reaching the model; the
    error, as Python words it, or None. Under agent.compat leaf-* farm does the same.

    Then it writes the request (``{"tool", "args", "workdir"}``, JSON, UTF-8) for its runner: an
    argument holding a lone surrogate (JSON's ``"\\ud800"``) cannot be encoded, so that call too
    fails the attempt and nothing runs (a Write writes nothing)."""
    return _bash_timeout_refused(call) or _request_unencodable(call, workdir)


def _request_unencodable(call: ToolCall, workdir: str) -> str | None:
    request = json.dumps({"tool": call.name, "args": call.args, "workdir": workdir}, ensure_ascii=False)
    try:
        request.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _bash_timeout_refused(call: ToolCall) -> str | None:
    if call.name != "Bash":
        return None
    args = call.args
    try:
        if args.get("timeout_ms") is not None:
            seconds = float(args["timeout_ms"]) / 1000.0
        else:
            seconds = 120.0 if args.get("timeout") is None else float(args["timeout"])
        int(max(0.1, seconds))  # its transport's whole-second timeout: inf does not convert
    except (TypeError, ValueError, OverflowError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


class ToolExecutor:
    def __init__(self, sandbox: Sandbox, workdir: str, cfg: AgentConfig) -> None:
        self.sandbox = sandbox
        self.workdir = workdir
        self.concurrent = cfg.tool_execution == "concurrent"
        self.concurrent_bash = cfg.concurrent_bash
        self.limits: dict[str, Any] = {
            "read_output_chars": cfg.read_output_chars,
            "bash_output_chars": cfg.bash_output_chars,
            "glob_limit": cfg.glob_limit,
            "bash_timeout_s": cfg.bash_timeout_s,
            "truncation": cfg.truncation,
            "compat": cfg.compat,
        }
        self.vendor = cfg.compat in VENDOR_UMASK

    async def run_turn(self, calls: list[ToolCall], *, time_left_s: float | None = None) -> list[ToolOutcome]:
        """Outcomes in call order, up to and including the first infrastructure failure."""
        limits = dict(self.limits, max_timeout_s=time_left_s)
        if not self.concurrent or len(calls) < 2:
            outcomes = []
            for call in calls:
                outcomes.append(await self._one(call, limits))
                if outcomes[-1].failure:
                    break
            return outcomes
        done = [asyncio.Event() for _ in calls]

        async def run(i: int) -> ToolOutcome:
            try:
                for j in range(i):
                    if self._conflict(calls[j], calls[i]):
                        await done[j].wait()
                return await self._one(calls[i], limits)
            finally:
                done[i].set()

        outcomes = list(await asyncio.gather(*(run(i) for i in range(len(calls)))))
        failed = next((i for i, o in enumerate(outcomes) if o.failure), None)
        return outcomes if failed is None else outcomes[: failed + 1]

    def _path(self, call: ToolCall) -> str | None:
        raw = call.args.get("file_path") or call.args.get("path")
        if not isinstance(raw, str) or not raw:
            return None
        return posixpath.normpath(posixpath.join(self.workdir, raw))

    def _conflict(self, a: ToolCall, b: ToolCall) -> bool:
        names = {a.name, b.name}
        if "Bash" in names:
            return not self.concurrent_bash
        if names <= READ_ONLY or not names <= set(TOOL_NAMES):
            return False
        if "Glob" in names:
            return "Write" in names
        return self._path(a) is None or self._path(a) == self._path(b)

    async def _one(self, call: ToolCall, limits: dict[str, Any]) -> ToolOutcome:
        rec = ToolCallRecord(call_id=call.call_id, name=call.name, args_ok=call.args_ok, started=time.monotonic())
        out = ToolOutcome(call, rec)
        refused = vendor_harness_refuses(call, self.workdir) if self.vendor else None
        if call.name not in TOOL_NAMES:
            out.observation, rec.error = f"Unknown tool: {call.name}", "UnknownTool"
        elif refused:
            out.failure = refused
        else:
            try:
                res = await self.sandbox.tool(ToolRequest(call.name, call.args, self.workdir, limits))
                out.observation = res.observation
                rec.truncated = res.truncated
                rec.error = res.error
                rec.command_s = res.command_s
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - transport/sandbox failure, not the model's
                out.failure = f"{type(exc).__name__}: {exc}"
                out.failure_type = type(exc)
        rec.ended = time.monotonic()
        rec.duration_s = rec.ended - rec.started
        rec.output_chars = len(out.observation or "")
        return out
