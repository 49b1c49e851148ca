"""Whose was a lost sandbox: the model's or the infrastructure's (issue 40).

Infrastructure errors are retried and kept out of the graded score because they are not the
model's doing. A model whose own command takes its sandbox down (a fork bomb, a memory blow-up,
a full disk) has failed the task: counted as infrastructure, its failure would cost more
attempts, vanish from the score, and become a lever (fork-bomb whenever stuck). So a lost
sandbox is attributed from what the backend observed of its own limits (``LimitEvents``: the
kernel's counters, read after the loss):

* a limit was met (the commands' pids or memory, or the agent's reserve): **the agent's**. The
  trial is graded ``unresolved`` with ``exit_reason`` naming the limit (``sandbox_oom``,
  ``sandbox_pids``, ``sandbox_disk``), counted in the score and never retried; the row keeps
  the evidence and the last command;
* no limit met, and the commands could not signal the sandbox agent (their own PID namespace):
  **infrastructure** (the engine, the node, the host), retried as before;
* the backend keeps no counters, or the commands could have killed the agent themselves:
  **unknown**, said in the row (``loss_cause``) and counted by the report, and treated as
  infrastructure (retried), since nothing shows it was the model's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from farm.agent.trajectory import Trajectory
from farm.sandbox.base import LimitEvents

# error class of a graded row whose sandbox the agent's commands took down: sandbox_limit:<limit>
SANDBOX_LIMIT = "sandbox_limit"
EXIT_REASONS = {"memory": "sandbox_oom", "pids": "sandbox_pids", "disk": "sandbox_disk"}
AGENT, INFRASTRUCTURE, UNKNOWN = "agent", "infrastructure", "unknown"


@dataclass(frozen=True)
class Attribution:
    cause: str  # AGENT | INFRASTRUCTURE | UNKNOWN (TrialResult.loss_cause)
    limit: str | None  # the limit met, for AGENT
    evidence: str


def attribute_loss(events: LimitEvents | None, isolation: str | None) -> Attribution:
    """Who lost the sandbox, from its limits' counters and how its commands were isolated."""
    if events is None:
        return Attribution(UNKNOWN, None, "the backend keeps no counters of its limits")
    hit = events.hit()
    if hit:
        return Attribution(AGENT, hit[0], events.evidence)
    if (isolation or "").startswith("pid-namespace"):
        return Attribution(INFRASTRUCTURE, None, events.evidence + "; the commands could not signal the sandbox agent")
    return Attribution(UNKNOWN, None, f"{events.evidence}; the commands could signal the sandbox agent "
                                      f"(isolation: {isolation or 'not reported'})")


def last_command(traj: Trajectory) -> str | None:
    """The last Bash command the model sent, from the trajectory's messages (None: none)."""
    for step in reversed(traj.steps):
        for message in reversed(step.messages):
            for call in reversed(message.get("tool_calls") or []):
                fn = call.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except (TypeError, ValueError):
                    continue
                if fn.get("name") == "Bash" and isinstance(args, dict) and isinstance(args.get("command"), str):
                    return args["command"]
    return None


def loss_message(verdict: Attribution, error: str | None, command: str | None) -> str:
    """The row's ``error`` for a sandbox the agent's commands took down."""
    text = f"the sandbox was lost after the agent's commands met its {verdict.limit} limit ({verdict.evidence})"
    if command is not None:
        text += f"; last command: {command[:500]}"
    return f"{text}; the loss: {error}" if error else text
