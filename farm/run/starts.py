"""The run-wide start gate: ``run.max_concurrent_starts`` sandbox starts at once across the
whole run, and the count of trials in each phase (waiting for a start, starting, running the
agent, grading) for the progress line and the run summary.

A start is CPU- and API-bound (process spawns, an environment build, a pod for the API server),
so a burst only makes every start time out; a bound per worker process let a Ray run with 64
workers ask for 64 x 16 pods in the same second. One ``GateBook`` holds the run's count: in the
caller's process for the local executor, inside one small named Ray actor for the ray executor,
which every worker calls.

A worker that dies while it holds a start slot would leak that slot forever. Two ways out: a
lease that expires, or releasing what the dead worker held once its death is known. A lease
must outlast the slowest legitimate start (a pod's cold pull is minutes; the start timeout is
900 s), so a timeout either frees slots of live starts (and the bound is broken) or holds a dead
worker's slots for 15 minutes. The driver already learns of every worker death: a worker can
hold a slot only while one of its trials is in flight, and that trial's call fails with a
RayActorError the moment Ray declares the actor (or its node) dead. So the driver releases a
dead worker's slots then (``release_holder``), and the gate refuses the holder from then on.
The gate actor itself is owned by the driver and dies with it: no run outlives its count.

The book also keeps, per attempt, its task, when it entered its phase and the step its
sandbox's start is in (``podman build``, ``build step 3: RUN ...``: ``SandboxStats.note_step``),
so that the progress line can name the oldest trial of each phase and how long it has been
there: a stalled start is then one line in a log, not a silent run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

PHASES = ("waiting", "starting", "running", "grading")


@dataclass
class _Where:
    """Where one attempt is: its phase, since when (monotonic), its task, its start's step."""

    phase: str
    name: str
    since: float
    step: str = ""


class GateBook:
    """The count itself: slots held and waited for, by token, and trial phases, by holder."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held: dict[str, str] = {}  # token -> holder
        self.waiting: dict[str, tuple[str, asyncio.Future[None]]] = {}  # token -> (holder, future), FIFO
        self.phases: dict[tuple[str, str], str] = {}  # (holder, trial) -> "running" | "grading"
        self.where: dict[tuple[str, str], _Where] = {}  # (holder, trial) -> its phase, task, since, step
        self.dead: set[str] = set()
        self.peak: dict[str, int] = dict.fromkeys(PHASES, 0)

    async def acquire(self, holder: str, token: str) -> bool:
        """Wait for a slot; False when ``holder`` was declared dead (it must not start)."""
        if holder in self.dead:
            return False
        if len(self.held) < self.limit and not self.waiting:
            self.held[token] = holder
            self._note()
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting[token] = (holder, fut)
        self._note()
        try:
            await fut
        except asyncio.CancelledError:
            self.release(token)
            raise
        return holder not in self.dead

    def release(self, token: str) -> None:
        """Give back a held slot, or stop waiting for one (both are safe to repeat)."""
        wait = self.waiting.pop(token, None)
        if wait is not None and not wait[1].done():
            wait[1].cancel()
        if self.held.pop(token, None) is not None:
            self._wake()

    def release_holder(self, holder: str) -> int:
        """``holder`` died: free every slot it held or waited for; how many it held."""
        self.dead.add(holder)
        for token in [t for t, (h, _) in self.waiting.items() if h == holder]:
            fut = self.waiting.pop(token)[1]
            if not fut.done():
                fut.set_result(None)  # its acquire answers False
        mine = [t for t, h in self.held.items() if h == holder]
        for token in mine:
            self.release(token)
        for key in [k for k in self.phases if k[0] == holder]:
            del self.phases[key]
        for key in [k for k in self.where if k[0] == holder]:
            del self.where[key]
        return len(mine)

    def set_phase(self, holder: str, trial: str, phase: str | None, name: str | None = None) -> None:
        """``trial`` is now in ``phase`` (None: it ended); ``name`` (its task) for the progress line."""
        key = (holder, trial)
        if phase is None or holder in self.dead:
            self.phases.pop(key, None)
            self.where.pop(key, None)
        else:
            if phase in ("running", "grading"):  # the waiting and starting counts are the slots'
                self.phases[key] = phase
            else:
                self.phases.pop(key, None)
            old = self.where.get(key)
            if old is None or old.phase != phase:
                self.where[key] = _Where(phase, name or (old.name if old else trial), time.monotonic())
        self._note()

    def set_step(self, holder: str, trial: str, step: str) -> None:
        """The step ``trial``'s sandbox start is in now (kept until its phase changes)."""
        where = self.where.get((holder, trial))
        if where is not None:
            where.step = step

    def oldest(self) -> dict[str, dict[str, object]]:
        """phase -> the attempt longest in it: ``{"name", "age_s", "step"}`` (phases with none left out)."""
        now = time.monotonic()
        out: dict[str, dict[str, object]] = {}
        for w in self.where.values():
            first = out.get(w.phase)
            if first is None or now - w.since > first["age_s"]:  # type: ignore[operator]
                out[w.phase] = {"name": w.name, "age_s": round(now - w.since, 1), "step": w.step}
        return out

    def _wake(self) -> None:
        while len(self.held) < self.limit and self.waiting:
            token = next(iter(self.waiting))
            holder, fut = self.waiting.pop(token)
            if fut.done():  # cancelled meanwhile
                continue
            self.held[token] = holder
            fut.set_result(None)
        self._note()

    def stats(self) -> dict[str, int]:
        now = {"waiting": len(self.waiting), "starting": len(self.held),
               "running": sum(1 for p in self.phases.values() if p == "running"),
               "grading": sum(1 for p in self.phases.values() if p == "grading")}
        return {**now, **{f"peak_{k}": v for k, v in self.peak.items()}}

    def _note(self) -> None:
        stats = self.stats()
        for k in PHASES:
            self.peak[k] = max(self.peak[k], stats[k])


class StartGate(Protocol):
    """What a trial sees of the gate."""

    def slot(self, trial: str) -> contextlib.AbstractAsyncContextManager[None]: ...

    def phase(self, trial: str, phase: str | None, name: str | None = None) -> None: ...

    def step(self, trial: str, step: str) -> None: ...


class StartRefused(Exception):
    """The gate declared this worker dead (its trials are already recorded as worker_lost)."""


class LocalGate:
    """The gate in this process: the local executor's, and the default for a bare run_trial."""

    holder = "local"

    def __init__(self, limit: int) -> None:
        self.book = GateBook(limit)

    @contextlib.asynccontextmanager
    async def slot(self, trial: str) -> AsyncIterator[None]:
        token = uuid.uuid4().hex
        await self.book.acquire(self.holder, token)
        try:
            yield
        finally:
            self.book.release(token)

    def phase(self, trial: str, phase: str | None, name: str | None = None) -> None:
        self.book.set_phase(self.holder, trial, phase, name)

    def step(self, trial: str, step: str) -> None:
        self.book.set_step(self.holder, trial, step)

    def stats(self) -> dict[str, int]:
        return self.book.stats()

    def oldest(self) -> dict[str, dict[str, object]]:
        return self.book.oldest()


class RayGate:
    """A worker's view of the gate actor; ``holder`` names the worker to the driver."""

    def __init__(self, actor: Any, holder: str) -> None:
        self.actor, self.holder = actor, holder

    @contextlib.asynccontextmanager
    async def slot(self, trial: str) -> AsyncIterator[None]:
        token = uuid.uuid4().hex
        try:
            granted = await self.actor.acquire.remote(self.holder, token)
        except asyncio.CancelledError:
            self.actor.release.remote(token)  # the remote wait goes on: end it there too
            raise
        if not granted:
            raise StartRefused(f"worker {self.holder} was declared lost")
        try:
            yield
        finally:
            self.actor.release.remote(token)  # fire and forget: the next waiter need not wait for us

    def phase(self, trial: str, phase: str | None, name: str | None = None) -> None:
        self.actor.set_phase.remote(self.holder, trial, phase, name)

    def step(self, trial: str, step: str) -> None:
        self.actor.set_step.remote(self.holder, trial, step)


class GateActor:
    """Body of the named Ray actor holding the run's count (an async actor: waits are cheap)."""

    def __init__(self, limit: int) -> None:
        self.book = GateBook(limit)

    async def acquire(self, holder: str, token: str) -> bool:
        return await self.book.acquire(holder, token)

    def release(self, token: str) -> None:
        self.book.release(token)

    def release_holder(self, holder: str) -> int:
        return self.book.release_holder(holder)

    def set_phase(self, holder: str, trial: str, phase: str | None, name: str | None = None) -> None:
        self.book.set_phase(holder, trial, phase, name)

    def set_step(self, holder: str, trial: str, step: str) -> None:
        self.book.set_step(holder, trial, step)

    def stats(self) -> dict[str, int]:
        return self.book.stats()

    def oldest(self) -> dict[str, dict[str, object]]:
        return self.book.oldest()


# run_trial without a gate (tests, the preflight): one per event loop, keyed by the loop itself,
# weakly: an id() of a closed loop can come back for a new one, whose trials would then wait on
# futures bound to the dead loop
_default_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LocalGate] = weakref.WeakKeyDictionary()


def default_gate(limit: int) -> LocalGate:
    loop = asyncio.get_running_loop()
    gate = _default_gates.get(loop)
    if gate is None:
        gate = _default_gates[loop] = LocalGate(limit)
    return gate
