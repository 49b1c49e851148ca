"""Discrete-event simulation of a whole run, for `farm plan` (farm/forecast/model.py).

One event heap; a trial attempt replays a measured (or stated) profile: wait for a trial slot
(``min(max_in_flight, pod_slots)``), wait for a start slot (``max_concurrent_starts``), start
its sandbox (plus an image pull when its image is new to the node its slot sits on), then for
every step one LLM call and the step's tool time, then the verifier and the attempt's remaining
orchestrator time. An attempt that ended in a retried infra error frees its slot and re-queues
at the front after the driver's backoff, as farm/run/driver.py does.

LLM calls (docs/scale.md, "The model"):
- ``endpoint``: every call takes its measured latency × ``latency_scale``; at most
  ``max_concurrency`` calls at once (0: unlimited, and then an attempt's agent phase is a single
  event, which keeps 10^6-step runs fast).
- ``gpu``: ``replicas`` servers, each holding at most ``max_batch`` calls (FIFO queue beyond); a
  trial sticks to the least-loaded replica at its start (prefix-cache affinity). A call needs
  w = uncached_prompt / prefill_tok_s + completion / decode_tok_s GPU-seconds at full batch and
  takes max(uncached / prefill_tok_s + completion / decode_tok_s_single, n · w) with n the calls
  on its replica when it is admitted (processor sharing frozen at admission: alone it runs at
  single-stream speed, under load the replica's throughput is shared).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

INF = math.inf


@dataclass(frozen=True)
class Step:
    latency_s: float
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    tool_s: float = 0.0

    @property
    def uncached(self) -> int:
        return max(0, self.prompt_tokens - self.cached_tokens)


@dataclass(frozen=True)
class Attempt:
    """One trial attempt as measured in a pilot (or stated in a workload)."""

    sandbox_start_s: float
    verify_s: float
    other_s: float  # wall_s minus start, LLM, tool and verifier time: the orchestrator's share
    steps: tuple[Step, ...] = ()
    retried: bool = False  # an infra error the driver retried: a further attempt follows

    @property
    def llm_s(self) -> float:
        return sum(s.latency_s for s in self.steps)

    @property
    def tool_s(self) -> float:
        return sum(s.tool_s for s in self.steps)


@dataclass(frozen=True)
class SimTrial:
    attempts: tuple[Attempt, ...]
    image: str = ""


@dataclass(frozen=True)
class LLMModel:
    mode: str = "endpoint"  # endpoint | gpu
    latency_scale: float = 1.0
    max_concurrency: int = 0
    replicas: int = 1
    gpus_per_replica: int = 1
    prefill_tok_s: float = 20000.0
    decode_tok_s: float = 4000.0
    decode_tok_s_single: float = 120.0
    max_batch: int = 256


@dataclass(frozen=True)
class Cluster:
    max_in_flight: int
    pod_slots: int = 0  # 0: unlimited (one machine: every in-flight trial has its sandbox)
    max_concurrent_starts: int = 16
    nodes: int = 1
    image_pull_s: float = 0.0
    startup_s: float = 0.0  # the run's own start before the first trial (executor, endpoint)
    warmup_s: float = 0.0  # one-time extra time of the first wave's trials (tokenizer load, imports)
    retry_backoff_s: float = 1.0
    llm: LLMModel = field(default_factory=LLMModel)

    @property
    def trial_slots(self) -> int:
        return min(self.max_in_flight, self.pod_slots) if self.pod_slots > 0 else self.max_in_flight


@dataclass
class SimResult:
    wall_s: float = 0.0
    trials: int = 0
    attempts: int = 0
    pod_s: float = 0.0  # sandbox seconds held (start to the end of the attempt)
    llm_calls: int = 0
    llm_s: float = 0.0  # seconds trials spent in LLM calls (queue included)
    llm_unloaded_s: float = 0.0  # what those calls take alone (endpoint: measured latency)
    llm_queue_s: float = 0.0
    gpu_work_s: float = 0.0  # GPU-seconds of work at full-batch efficiency (gpu mode)
    start_queue_s: float = 0.0
    slot_wait_s: float = 0.0  # trial-seconds spent waiting for a trial slot
    image_pulls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    in_flight_area: float = 0.0  # integral of trials in flight over time

    @property
    def mean_in_flight(self) -> float:
        return self.in_flight_area / self.wall_s if self.wall_s > 0 else 0.0


class _Sim:
    def __init__(self, trials: list[SimTrial], cluster: Cluster) -> None:
        self.trials, self.c, self.llm = trials, cluster, cluster.llm
        self.heap: list[tuple[float, int, str, int]] = []
        self.seq = 0
        self.now = 0.0
        self.r = SimResult(trials=len(trials))
        self.pending: deque[int] = deque(range(len(trials)))
        self.queued_at = [cluster.startup_s] * len(trials)
        self.attempt = [0] * len(trials)
        self.step = [0] * len(trials)
        self.slot = [-1] * len(trials)
        self.replica = [0] * len(trials)
        self.t_start = [0.0] * len(trials)
        self.call_t = [0.0] * len(trials)
        self.free_slots: list[int] = list(range(cluster.trial_slots - 1, -1, -1))
        self.in_flight = 0
        self.last_change = cluster.startup_s
        self.starting = 0
        self.start_queue: deque[int] = deque()
        self.pulled: set[tuple[int, str]] = set()
        self.llm_active = [0] * max(1, self.llm.replicas)
        self.llm_trials = [0] * max(1, self.llm.replicas)
        self.llm_queue: list[deque[int]] = [deque() for _ in range(max(1, self.llm.replicas))]
        self.collapse = self.llm.mode == "endpoint" and self.llm.max_concurrency <= 0
        self.first_wave = cluster.trial_slots  # attempts still to admit that pay the warm-up
        self.extra = [0.0] * len(trials)

    def push(self, t: float, kind: str, i: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, i))

    def _in_flight(self, delta: int) -> None:
        self.r.in_flight_area += self.in_flight * (self.now - self.last_change)
        self.last_change = self.now
        self.in_flight += delta

    def admit(self) -> None:
        while self.pending and self.free_slots:
            i = self.pending.popleft()
            self.slot[i] = self.free_slots.pop()
            self.r.slot_wait_s += self.now - self.queued_at[i]
            self._in_flight(+1)
            self.t_start[i] = self.now
            self.extra[i] = self.c.warmup_s if self.first_wave > 0 else 0.0
            self.first_wave -= 1
            if self.starting < self.c.max_concurrent_starts:
                self.begin_start(i)
            else:
                self.start_queue.append(i)
                self.queued_at[i] = self.now

    def begin_start(self, i: int) -> None:
        self.starting += 1
        att = self.trials[i].attempts[self.attempt[i]]
        dur = att.sandbox_start_s
        node = self.slot[i] % max(1, self.c.nodes)
        key = (node, self.trials[i].image)
        if self.c.image_pull_s > 0 and key not in self.pulled:
            self.pulled.add(key)
            self.r.image_pulls += 1
            dur += self.c.image_pull_s
        self.push(self.now + dur, "started", i)

    def started(self, i: int) -> None:
        self.starting -= 1
        if self.start_queue:
            j = self.start_queue.popleft()
            self.r.start_queue_s += self.now - self.queued_at[j]
            self.begin_start(j)
        att = self.trials[i].attempts[self.attempt[i]]
        self.step[i] = 0
        if self.llm.mode == "gpu":
            rep = min(range(len(self.llm_trials)), key=self.llm_trials.__getitem__)
            self.replica[i] = rep
            self.llm_trials[rep] += 1
        if self.collapse:
            llm = att.llm_s * self.llm.latency_scale
            self._count_calls(att.steps, llm, llm)
            self.push(self.now + llm + att.tool_s, "agent_done", i)
        else:
            self.next_step(i)

    def _count_calls(self, steps: tuple[Step, ...], spent: float, unloaded: float) -> None:
        self.r.llm_calls += len(steps)
        self.r.llm_s += spent
        self.r.llm_unloaded_s += unloaded
        for s in steps:
            self.r.prompt_tokens += s.prompt_tokens
            self.r.cached_tokens += s.cached_tokens
            self.r.completion_tokens += s.completion_tokens

    def next_step(self, i: int) -> None:
        att = self.trials[i].attempts[self.attempt[i]]
        if self.step[i] >= len(att.steps):
            self.agent_done(i)
            return
        self.call_t[i] = self.now
        rep = self.replica[i] if self.llm.mode == "gpu" else 0
        cap = self.llm.max_batch if self.llm.mode == "gpu" else (self.llm.max_concurrency or INF)
        if self.llm_active[rep] < cap:
            self.begin_call(i, rep)
        else:
            self.llm_queue[rep].append(i)

    def begin_call(self, i: int, rep: int) -> None:
        self.llm_active[rep] += 1
        s = self.trials[i].attempts[self.attempt[i]].steps[self.step[i]]
        self.r.llm_queue_s += self.now - self.call_t[i]
        if self.llm.mode == "gpu":
            m = self.llm
            prefill = s.uncached / m.prefill_tok_s
            work = prefill + s.completion_tokens / m.decode_tok_s
            alone = prefill + s.completion_tokens / m.decode_tok_s_single
            dur = max(alone, self.llm_active[rep] * work)
            self.r.gpu_work_s += work
        else:
            dur = alone = s.latency_s * self.llm.latency_scale
        self.r.llm_unloaded_s += alone
        self.r.llm_calls += 1
        self.r.prompt_tokens += s.prompt_tokens
        self.r.cached_tokens += s.cached_tokens
        self.r.completion_tokens += s.completion_tokens
        self.push(self.now + dur, "call_done", i)

    def call_done(self, i: int) -> None:
        rep = self.replica[i] if self.llm.mode == "gpu" else 0
        self.llm_active[rep] -= 1
        self.r.llm_s += self.now - self.call_t[i]
        if self.llm_queue[rep]:
            self.begin_call(self.llm_queue[rep].popleft(), rep)
        s = self.trials[i].attempts[self.attempt[i]].steps[self.step[i]]
        self.step[i] += 1
        self.push(self.now + s.tool_s, "tool_done", i)

    def agent_done(self, i: int) -> None:
        att = self.trials[i].attempts[self.attempt[i]]
        if self.llm.mode == "gpu":
            self.llm_trials[self.replica[i]] -= 1
        self.push(self.now + att.verify_s + att.other_s + self.extra[i], "attempt_done", i)

    def attempt_done(self, i: int) -> None:
        self.r.attempts += 1
        self.r.pod_s += self.now - self.t_start[i]
        self.free_slots.append(self.slot[i])
        self._in_flight(-1)
        att = self.trials[i].attempts[self.attempt[i]]
        if att.retried and self.attempt[i] + 1 < len(self.trials[i].attempts):
            self.attempt[i] += 1
            self.push(self.now + self.c.retry_backoff_s * 2 ** (self.attempt[i] - 1), "requeue", i)
        self.r.wall_s = max(self.r.wall_s, self.now)
        self.admit()

    def requeue(self, i: int) -> None:
        self.pending.appendleft(i)
        self.queued_at[i] = self.now
        self.admit()

    def run(self) -> SimResult:
        if self.c.trial_slots < 1:
            raise ValueError("cluster: min(max_in_flight, pod_slots) must be at least 1")
        self.now = self.c.startup_s
        self.admit()
        handlers = {"started": self.started, "call_done": self.call_done, "tool_done": self.next_step,
                    "agent_done": self.agent_done, "attempt_done": self.attempt_done, "requeue": self.requeue}
        while self.heap:
            self.now, _, kind, i = heapq.heappop(self.heap)
            handlers[kind](i)
        self.r.wall_s = max(self.r.wall_s, self.c.startup_s)
        return self.r


def simulate(trials: list[SimTrial], cluster: Cluster) -> SimResult:
    """Predicted course of a run of ``trials`` (plan order) on ``cluster``."""
    return _Sim(trials, cluster).run()
