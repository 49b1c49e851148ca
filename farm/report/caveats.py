"""Warnings a report must show above its numbers: trials whose image was not the task's own.

A score is comparable with a published one only when each trial ran the task's image, pulled
or built from its Dockerfile on the real base image. Two row columns say otherwise
(farm/sandbox/base.py ImageProvenance): ``base_image_standin`` (built on a farm stand-in base
from ``make images``) and ``image_unfaithful`` (``sandbox.local.allow_any_image``: the task's
image or build steps were not used). Any such trial turns into a warning line here, counted per
run, so that neither kind of score can be quoted as a benchmark result by mistake.

A run grading a predictions file (``agent=predictions``) also says how many selected instances
the file had no prediction for: they were not run, so the score's denominator is the instances
graded, not the benchmark (the harness's ``submitted`` versus ``total``).

And it counts the sandboxes lost for a cause farm could not tell (``loss_cause`` unknown,
farm/run/attribution.py): they are infra errors, left out of the graded-only rate like any other,
but nothing shows they were not the model's own doing, so the reader is told how many there are.
"""

from __future__ import annotations

from dataclasses import dataclass

from farm.report.data import RunData, latest_attempts
from farm.report.limits import unknown_losses

STANDIN = "standin"
UNFAITHFUL = "unfaithful"
PREDICTIONS = "predictions"
LOSS_UNKNOWN = "loss_unknown"


@dataclass(frozen=True)
class Caveat:
    kind: str  # standin | unfaithful | predictions | loss_unknown
    run_id: str
    trials: int  # trials (latest attempt each) of the run carrying the mark
    of: int  # all trials of the run with a row
    tasks: tuple[str, ...]  # the tasks concerned, sorted (the row's image is the name the task gives,
    # not the stand-in that was built, so the task id says more)

    @property
    def text(self) -> str:
        shown = ", ".join(self.tasks[:5]) + (f", … ({len(self.tasks)} in all)" if len(self.tasks) > 5 else "")
        where = f" (tasks: {shown})" if shown else ""
        if self.kind == LOSS_UNKNOWN:
            lost = f"{self.trials} sandbox{'es' if self.trials != 1 else ''}"
            return (f"{lost} lost, cause unknown: {self.trials} of {self.of} trials of run {self.run_id} "
                    "ended with a lost sandbox that farm could not attribute to the model's commands or to the "
                    f"infrastructure{where}. They count as infra errors (failures in Avg@k, out of the "
                    "graded-only rate); were they the model's, they would be graded unresolved.")
        if self.kind == PREDICTIONS:
            return (f"Missing predictions: {self.trials} of the {self.of} selected instances of run {self.run_id} "
                    f"have no prediction in the file and were not run{where.replace('tasks: ', 'instances: ')}; "
                    "the score is over the instances graded.")
        if self.kind == STANDIN:
            return (f"Stand-in base images: {self.trials} of {self.of} trials of run {self.run_id} were built "
                    f"on a farm stand-in base image (`make images`: Debian roots tagged with the tasks' "
                    f"base image names), not the real one{where}. These scores test the harness; they are "
                    "not comparable with published numbers.")
        return (f"Unfaithful images: {self.trials} of {self.of} trials of run {self.run_id} ran without the "
                f"task's image or its build steps (sandbox.local.allow_any_image=true){where}. Score at your "
                "own risk: a trial may fail or pass only because its environment differs from the task's.")


def image_caveats(runs: list[RunData]) -> list[Caveat]:
    """One caveat per run and kind that has at least one marked trial; runs in the order given."""
    out = []
    for run in runs:
        rows = latest_attempts(run.trials.to_pylist())
        for kind, column in ((STANDIN, "base_image_standin"), (UNFAITHFUL, "image_unfaithful")):
            marked = [r for r in rows if r.get(column)]
            if marked:
                tasks = tuple(sorted({str(r["task_id"]) for r in marked if r.get("task_id")}))
                out.append(Caveat(kind, run.run_id, len(marked), len(rows), tasks))
    return out


def predictions_caveats(runs: list[RunData]) -> list[Caveat]:
    """One caveat per run of a predictions file that left selected instances out (run.json's
    ``predictions``, farm/run/predictions.py)."""
    out = []
    for run in runs:
        info = run.meta.get("predictions") or {}
        if info.get("missing"):
            out.append(Caveat(PREDICTIONS, run.run_id, int(info["missing"]), int(info.get("selected") or 0),
                              tuple(info.get("missing_ids") or ())))
    return out


def loss_caveats(runs: list[RunData]) -> list[Caveat]:
    """One caveat per run with trials whose latest attempt lost its sandbox for an unknown cause."""
    out = []
    for run in runs:
        lost, rows, tasks = unknown_losses(run)
        if lost:
            out.append(Caveat(LOSS_UNKNOWN, run.run_id, lost, rows, tasks))
    return out


def run_caveats(runs: list[RunData]) -> list[Caveat]:
    """Every warning the report shows above its numbers."""
    return image_caveats(runs) + predictions_caveats(runs) + loss_caveats(runs)
