"""Two real runs of one small experiment, shared by the export and diff tests.

Both run the bundled tasks in bubblewrap sandboxes against farm's local policy endpoints,
through the real Leaf loop, verifiers and Parquet store. Run B changes run A like this:
arm ``same`` is untouched, arm ``regraded`` changes only its grader settings
(grade.verifier_retries), arm ``changed`` swaps its agent (scripted -> oracle).
The scripted agent reasons, calls tools in parallel, sends one malformed tool call, and solves
only ``SOLVED``, so the trajectories hold everything an ATIF document can carry.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import yaml

TASKS = ["swe-paginate-off-by-one", "term-dedupe-inbox"]
SOLVED = "swe-paginate-off-by-one"
REASONING = "I should look at the files before changing anything."

_SURVEY = {
    "content": "Surveying first.",
    "reasoning": REASONING,
    "usage": {"prompt_tokens_details": {"cached_tokens": 7}, "completion_tokens_details": {"reasoning_tokens": 11}},
    "tool_calls": [{"name": "Glob", "arguments": {"pattern": "*"}},
                   {"name": "Glob", "arguments": '{"pattern": '}],  # malformed JSON on purpose
}
SCRIPT = {
    "*": [_SURVEY, {"content": "I could not find the problem."}],
    SOLVED: [_SURVEY,
             {"tool_calls": [{"name": "Bash", "arguments": {"command": "bash /solution/solve.sh", "timeout": 300}}]},
             {"content": "Applied the fix."}],
}


@dataclass(frozen=True)
class DemoRuns:
    store: str
    run_a: str
    run_b: str


def _experiment(script: Path, changed: bool) -> dict:
    scripted = ["agent.name=scripted", f"agent.script={script}", "model.name=scripted-survey"]
    return {"experiment": {"name": "diffdemo", "arms": [
        {"name": "same", "overrides": ["agent.name=nop", "model.name=nop"]},
        {"name": "regraded", "overrides": ["agent.name=oracle", "model.name=oracle"]
         + (["grade.verifier_retries=2"] if changed else [])},
        {"name": "changed", "overrides": ["agent.name=oracle", "model.name=oracle"] if changed else scripted},
    ]}}


def make_demo_runs(root: Path) -> DemoRuns:
    """Run the experiment twice (A, then B) into one store under ``root``."""
    from farm.config import load_config
    from farm.run.driver import run_experiment

    script = root / "survey-policy.yaml"
    script.write_text(yaml.safe_dump(SCRIPT))
    store = str(root / "store")
    ids = []
    for changed in (False, True):
        conf = root / f"experiment-{changed}.yaml"
        conf.write_text(yaml.safe_dump(_experiment(script, changed)))
        cfg = load_config(["benchmark=builtin", f"benchmark.task_ids=[{','.join(TASKS)}]", "run.executor=local",
                           f"store.uri={store}", "run.max_in_flight=6", "run.seeds=1", "run.preflight=false"],
                          config_file=conf)
        ids.append(asyncio.run(run_experiment(cfg)).run_id)
    return DemoRuns(store, ids[0], ids[1])
