"""``run.max_concurrent_starts`` bounds sandbox starts across the whole run (farm/run/starts.py):
the count itself, a local run, and a Ray run whose workers share one count."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from farm.config import load_config
from farm.run.driver import run_experiment
from farm.run.progress import RunProgress
from farm.run.starts import GateBook
from farm.store import ResultStore
from tests.support.tasks import CHECK_ANSWER, make_task_dir


def _slow_start_tasks(root: Path, n: int, start_s: float = 1.0) -> Path:
    """Harbor tasks whose local sandbox start takes ``start_s`` (a replayed build step sleeps)."""
    for i in range(n):
        d = make_task_dir(root, f"t{i}", CHECK_ANSWER)
        with (d / "environment" / "Dockerfile").open("a") as f:
            f.write(f"RUN sleep {start_s}\n")
    return root


def _max_overlap(rows: list[dict]) -> int:
    """The most sandbox starts in progress at one moment, from the rows' start intervals."""
    edges = []
    for r in rows:
        assert r["sandbox_started_at"] is not None and r["sandbox_start_s"] is not None, r["error"]
        edges += [(r["sandbox_started_at"], 1), (r["sandbox_started_at"] + r["sandbox_start_s"], -1)]
    now = most = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # an end before a start at the same instant
        now += step
        most = max(most, now)
    return most


# --- the count ---------------------------------------------------------------------------------


def test_the_book_bounds_slots_and_grants_them_in_order() -> None:
    async def main() -> None:
        book = GateBook(2)
        assert await book.acquire("w0", "a") and await book.acquire("w1", "b")
        order: list[str] = []

        async def wait(holder: str, token: str) -> None:
            assert await book.acquire(holder, token)
            order.append(token)

        waits = [asyncio.create_task(wait("w0", t)) for t in ("c", "d")]
        await asyncio.sleep(0.01)
        assert book.stats()["starting"] == 2 and book.stats()["waiting"] == 2 and order == []
        book.release("a")
        await asyncio.sleep(0.01)
        assert order == ["c"]  # first come, first served
        book.release("a")  # a repeated release frees nothing more
        await asyncio.sleep(0.01)
        assert order == ["c"] and book.stats()["starting"] == 2
        book.release("b")
        await asyncio.gather(*waits)
        assert order == ["c", "d"] and book.stats()["peak_waiting"] == 2 and book.stats()["peak_starting"] == 2

    asyncio.run(main())


def test_a_dead_workers_slots_are_freed_and_it_is_refused_from_then_on() -> None:
    async def main() -> None:
        book = GateBook(1)
        assert await book.acquire("dead", "a")
        book.set_phase("dead", "trial-x", "running")
        theirs = asyncio.create_task(book.acquire("dead", "b"))  # its waiting start, too
        mine = asyncio.create_task(book.acquire("alive", "c"))
        await asyncio.sleep(0.01)
        assert not mine.done()
        assert book.release_holder("dead") == 1
        assert await mine is True and await theirs is False
        assert await book.acquire("dead", "d") is False
        stats = book.stats()
        assert (stats["starting"], stats["waiting"], stats["running"]) == (1, 0, 0)

    asyncio.run(main())


def test_a_cancelled_wait_gives_its_slot_back() -> None:
    async def main() -> None:
        book = GateBook(1)
        assert await book.acquire("w", "a")
        waiter = asyncio.create_task(book.acquire("w", "b"))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        book.release("a")
        assert await book.acquire("w", "c") and book.stats()["starting"] == 1

    asyncio.run(main())


def test_the_progress_line_shows_where_the_trials_in_flight_are() -> None:
    p = RunProgress(enabled=False)
    assert p.phase_detail() == ""
    p.hook("phases", {"waiting": 3, "starting": 2, "running": 5, "grading": 1})
    assert p.phase_detail() == " (queued 3, starting 2, running 5, grading 1)"


# --- runs --------------------------------------------------------------------------------------


@pytest.mark.bwrap
def test_a_local_run_never_starts_more_than_the_bound(tmp_path: Path) -> None:
    tasks = _slow_start_tasks(tmp_path / "tasks", 5)
    cfg = load_config(["agent=oracle", "run.executor=local", f"benchmark.path={tasks}",
                       f"store.uri={tmp_path / 'store'}", f"sandbox.local.root_dir={tmp_path / 'sb'}",
                       "run.max_in_flight=5", "run.max_concurrent_starts=2", "run.progress=false",
                       "run.preflight=false"])
    summary = asyncio.run(run_experiment(cfg))
    rows = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id).to_pylist()
    assert sorted(r["status"] for r in rows) == ["resolved"] * 5, [r["error"] for r in rows]
    assert _max_overlap(rows) == 2  # the bound, and used
    assert summary.peak_phases["starting"] == 2 and summary.peak_phases["waiting"] >= 1


@pytest.mark.integration
def test_ray_workers_share_one_bound_on_starts(tmp_path: Path, monkeypatch) -> None:
    # a private Ray started by this run: the count is the run's, not a cluster's
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    tasks = _slow_start_tasks(tmp_path / "tasks", 6)
    cfg = load_config(["agent=oracle", "run.executor=ray", "run.workers=3", f"benchmark.path={tasks}",
                       f"store.uri={tmp_path / 'store'}", f"sandbox.local.root_dir={tmp_path / 'sb'}",
                       "run.max_in_flight=6", "run.max_concurrent_starts=2", "run.progress=false",
                       "run.preflight=false"])
    summary = asyncio.run(run_experiment(cfg))
    rows = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id).to_pylist()
    assert sorted(r["status"] for r in rows) == ["resolved"] * 6
    # three workers of two trials each: a bound per worker would have let six start at once
    assert len({r["worker"] for r in rows}) == 3
    assert _max_overlap(rows) <= 2
    assert summary.peak_phases["starting"] == 2 and summary.peak_phases["waiting"] >= 1
