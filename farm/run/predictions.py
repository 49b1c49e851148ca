"""A run of ``agent=predictions``: which tasks it has, what its plan calls the model, and the
two steps of a trial around the policy's one Bash call (stage the patch, read what applied).

Which tasks: the benchmark's selection (``task_ids``, ``sample``, ``limit``) first, then only
the instances the file has, so a seeded sample is the same instances for every submission
graded with it, and a selected instance without a prediction is not run. How many were left
out, and which, is stored in the run's metadata (``run.json`` ``predictions``) for the report.
"""

from __future__ import annotations

import shlex
from typing import Any

from farm.agent.predictions import APPLIED_PATH, OUTPUT_PATH, Prediction, Predictions, harness_apply, load_predictions
from farm.config import FarmConfig, require_endpoint, resolved_agent
from farm.errors import ConfigError
from farm.sandbox.base import Sandbox
from farm.tasks.model import Task

MISSING_SHOWN = 200  # ids listed in run.json; the count is always whole


def grade_overrides(file: str, overrides: list[str]) -> list[str]:
    """What ``farm grade FILE [overrides]`` runs: ``farm run`` with the predictions policy on
    FILE, on SWE-bench Verified unless the overrides name a benchmark; the user's overrides win."""
    named = any(o.split("=", 1)[0] in ("benchmark", "benchmark.name") for o in overrides)
    bench = [] if named else ["benchmark=swebench-verified"]
    return ["agent=predictions", f"agent.predictions={file}", *bench, *overrides]


def require_inputs(cfg: FarmConfig) -> None:
    """What ``farm run`` checks before loading any task: the endpoint rule, and a predictions
    file that reads (its error names the file, the line and the field).

    Raises:
        ConfigError: one line naming the fix.
    """
    require_endpoint(cfg)
    if resolved_agent(cfg) == "predictions":
        load_predictions(str(cfg.agent.predictions))


def run_predictions(arms: list[tuple[str, FarmConfig]]) -> Predictions | None:
    """The predictions file of the run's arms that use the policy (None: no arm does).

    Raises:
        ConfigError: two arms name different files (one run grades one file), or the file is bad.
    """
    files = {a.agent.predictions for _, a in arms if resolved_agent(a) == "predictions"}
    if not files:
        return None
    if len(files) > 1:
        raise ConfigError(f"invalid value {sorted(map(str, files))!r} for 'agent.predictions': one run grades "
                          "one predictions file (start a run per file)")
    return load_predictions(str(next(iter(files))))


def restrict(tasks: list[Task], preds: Predictions) -> tuple[list[Task], dict[str, Any]]:
    """The selected tasks that have a prediction, and what run.json records about the rest."""
    kept = [t for t in tasks if t.task_id in preds.by_id]
    missing = sorted({t.task_id for t in tasks} - preds.by_id.keys())
    selected = {t.task_id for t in tasks}
    info = {
        "file": preds.path, "sha256": preds.sha256, "model": preds.model,
        "predictions": len(preds.by_id), "selected": len(selected), "run": len({t.task_id for t in kept}),
        "empty": sum(1 for t in selected if t in preds.by_id and not preds.by_id[t].patch),
        "missing": len(missing), "missing_ids": missing[:MISSING_SHOWN],
        # predictions of instances the selection does not hold (or the benchmark lacks)
        "outside_selection": len(preds.by_id.keys() - selected),
    }
    return kept, info


def plan_model(acfg: FarmConfig) -> str:
    """What the plan calls an arm's model: the model id for a model, the file's model for
    predictions (its rows are grouped under it), else the policy."""
    policy = resolved_agent(acfg)
    if policy == "leaf":
        return acfg.model.name
    if policy == "predictions":
        return load_predictions(str(acfg.agent.predictions)).model
    return policy


def prediction_for(cfg: FarmConfig, task_id: str) -> Prediction | None:
    """This task's prediction in the arm's file (read once per process and file version)."""
    return load_predictions(str(cfg.agent.predictions)).by_id.get(task_id)


async def stage_prediction(sandbox: Sandbox, pred: Prediction) -> None:
    """The patch at the harness's path, for the policy's Bash call to apply (as the oracle's
    solution is uploaded for its call): byte for byte, whatever its size or encoding."""
    _, path = harness_apply()
    await sandbox.write_file(path, pred.patch_bytes())


async def apply_outcome(sandbox: Sandbox) -> tuple[bool, str]:
    """Whether the policy's call applied the patch, and what the last command tried printed.
    Nothing recorded (the call never ran, it timed out) is "not applied", as in the harness."""
    res = await sandbox.exec(f"cat {shlex.quote(APPLIED_PATH)} 2>/dev/null; echo; cat {shlex.quote(OUTPUT_PATH)}",
                             timeout_s=60, cwd="/")
    applied, _, output = res.stdout.partition("\n")
    if applied.strip():
        return True, f"applied with: {applied.strip()}\n{output.lstrip(chr(10))}"
    return False, output.lstrip("\n")
