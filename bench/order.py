"""Wall time of a run in dataset order against run.order=longest_first, simulated.

    .venv/bin/python bench/order.py [--tasks 200] [--seeds 3] [--slots 32] [--seed 0]
    .venv/bin/python bench/order.py --store ./farm-results [--slots 32]

Each trial takes a fixed time and a run keeps ``--slots`` trials in flight (run.max_in_flight),
starting the next queued trial the moment a slot frees: the makespan of that list schedule is
the run's wall time. The queue is what farm's own ``order_trials`` (farm/run/order.py) gives
for each order, so this measures farm's ordering, not a copy of it.

Durations: with ``--store``, every task's median wall time there (the real long tail of runs
already made), with the tasks' timeouts unknown (so longest_first orders by those priors); else a
synthetic long tail -- log-normal durations (sigma 1.0, median 120 s) -- whose timeouts are the
duration times a random factor 1.5-6, so the timeout-only ordering is an imperfect guess, as it
is on real benchmarks. Prints one table: order, what the expectation was, wall time, the share of
slot-time left idle. It simulates; it measures no sandbox or model.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from farm.run.order import order_trials, store_priors  # noqa: E402
from farm.run.plan import TrialSpec  # noqa: E402
from farm.tasks.model import Environment, Task, VerifierSpec  # noqa: E402


def makespan(durations: list[float], slots: int) -> float:
    """Wall time of running ``durations`` in this order on ``slots`` slots (each starts when one frees)."""
    free = [0.0] * max(1, slots)
    heapq.heapify(free)
    end = 0.0
    for d in durations:
        start = heapq.heappop(free)
        heapq.heappush(free, start + d)
        end = max(end, start + d)
    return end


def _task(benchmark: str, task_id: str, timeout_s: float) -> Task:
    return Task(benchmark, task_id, "", Environment(), VerifierSpec(), agent_timeout_s=timeout_s,
                verifier_timeout_s=0.0)


def synthetic(n: int, seed: int) -> tuple[dict, dict[tuple[str, str], float]]:
    rng = random.Random(seed)
    tasks, truth = {}, {}
    for i in range(n):
        key = ("synthetic", f"t{i:04d}")
        truth[key] = 120.0 * rng.lognormvariate(0.0, 1.0)
        tasks[key] = _task(*key, truth[key] * rng.uniform(1.5, 6.0))
    return tasks, truth


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--slots", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store", help="take durations from the runs in this store (median wall per task)")
    args = ap.parse_args()

    if args.store:
        from farm.store.results import ResultStore

        truth = store_priors(ResultStore.open(args.store))
        if not truth:
            sys.exit(f"no finished trial rows with wall_s in {args.store}")
        tasks = {k: _task(*k, 0.0) for k in truth}
        estimates = {"prior (store medians)": truth}
    else:
        tasks, truth = synthetic(args.tasks, args.seed)
        estimates = {"timeout (imperfect)": {}, "prior (exact)": truth}
    todo = [TrialSpec("bench", f"{k[1]}-{s}", k[0], k[1], s, "base", "m") for k in tasks for s in range(args.seeds)]
    # the dataset order (tasks as listed, their seeds together) is unrelated to their durations

    def wall(order: list[TrialSpec]) -> float:
        return makespan([truth[(s.benchmark, s.task_id)] for s in order], args.slots)

    busy = sum(truth[(s.benchmark, s.task_id)] for s in todo)
    rows = [("dataset", "-", wall(todo))]
    for label, priors in estimates.items():
        rows.append(("longest_first", label, wall(order_trials(todo, tasks, "longest_first", priors))))
    print(f"{len(todo)} trials, {len(tasks)} tasks, {args.slots} slots, "
          f"{'store ' + args.store if args.store else f'synthetic long tail, seed {args.seed}'}")
    print(f"{'order':<15}{'expected from':<24}{'wall s':>10}{'idle %':>9}")
    for order, label, w in rows:
        print(f"{order:<15}{label:<24}{w:>10.0f}{100 * (1 - busy / (w * args.slots)):>9.1f}")


if __name__ == "__main__":
    main()
