"""bench/harness_overhead.py and bench/sandbox_roundtrip.py: their command lines (``--backend``),
the tables they print and how a container start is split into phases, in this process.

The real runs on podman are tests/sandbox/docker/test_bench_podman.py."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from bench import container_backend as cb

ROOT = Path(__file__).resolve().parents[2]


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


overhead = _bench("harness_overhead")
roundtrip = _bench("sandbox_roundtrip")

# the rows docs/performance.md's table has, in its order, for either backend
OVERHEAD_ROWS = ("whole tool call", "harness (all but the shell)", "  processes around the shell",
                 "  channel + tools", "  loop bookkeeping", "llm round trip (instant)", "shell itself (bash -lc true)")


# --- harness_overhead: arguments -------------------------------------------------------------


def test_the_backend_is_local_unless_docker_is_asked_for() -> None:
    args = overhead.parse_args([])
    assert (args.backend, args.compats, args.rounds, args.peer_python) == ("local", ["farm-safe", "leaf-2609"], 5, None)
    args = overhead.parse_args(["--backend", "docker", "--calls", "4", "--rounds", "1", "--compat", "leaf-2609",
                                "--peer-python", "/venv/bin/python"])
    assert (args.backend, args.calls, args.rounds, args.compats) == ("docker", 4, 1, ["leaf-2609"])
    assert args.peer_python == "/venv/bin/python"  # kept with either backend


def test_an_unknown_backend_is_refused_by_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        overhead.parse_args(["--backend", "kubernetes"])
    assert e.value.code == 2 and "invalid choice: 'kubernetes'" in capsys.readouterr().err


def test_rounds_never_exceed_calls_and_settings_are_checked() -> None:
    assert overhead.parse_args(["--calls", "3", "--rounds", "5"]).rounds == 3
    assert overhead.parse_args(["--calls", "3", "--rounds", "0"]).rounds == 1
    with pytest.raises(SystemExit, match="--compat: \\['leaf-9999'\\] is not among"):
        overhead.parse_args(["--compat", "farm-safe,leaf-9999"])
    with pytest.raises(SystemExit, match="--calls"):
        overhead.parse_args(["--calls", "0"])


# --- harness_overhead: the table --------------------------------------------------------------


def _parts(whole: float, command: float) -> dict[str, list[float]]:
    """Four calls of one setting, in seconds."""
    return {"whole": [whole] * 4, "command": [command] * 4, "loop": [0.0005] * 4, "llm": [0.004] * 4}


def test_the_header_names_the_backend_and_its_engine_first() -> None:
    lines = overhead.header("docker", "podman version 4.3.1", 4, 1, "sequential", "bytes", 0.5)
    assert lines[0] == "backend docker, engine podman version 4.3.1"
    assert lines[1] == ("Bash true per tool call (4 calls per setting in 1 rounds, sequential, tokenizer=bytes, "
                        "load 0.5)")


def test_the_table_has_every_part_for_each_setting_side_by_side() -> None:
    shell = [0.003] * 4  # the shell alone: 3 ms
    lines = overhead.table(shell, {"farm-safe": _parts(0.010, 0.006), "leaf-2609": _parts(0.0105, 0.0065)})
    assert lines[0].split()[-2:] == ["farm-safe", "leaf-2609"]
    assert [line[:32].rstrip() for line in lines[1:8]] == list(OVERHEAD_ROWS)
    # p50 / p95 per setting, in ms
    cells = {line[:32].strip(): re.findall(r"-?\d+\.\d+", line[32:]) for line in lines[1:8]}
    assert cells["whole tool call"] == ["10.00", "10.00", "10.50", "10.50"]
    assert cells["harness (all but the shell)"][::2] == ["7.50", "8.00"]  # 10 - 3 + 0.5, 10.5 - 3 + 0.5
    assert cells["processes around the shell"][::2] == ["3.00", "3.50"]  # 6 - 3, 6.5 - 3
    assert cells["channel + tools"][::2] == ["4.00", "4.00"]  # 10 - 6, 10.5 - 6.5
    assert cells["loop bookkeeping"][::2] == ["0.50", "0.50"]
    assert cells["llm round trip (instant)"][::2] == ["4.00", "4.00"]
    assert cells["shell itself (bash -lc true)"] == ["3.00", "3.00"]  # one column: the same for every setting
    assert lines[8] == "whole tool call leaf-2609 / farm-safe: 1.050 (within 10 %)"


def test_a_setting_run_alone_has_no_ratio_line() -> None:
    lines = overhead.table([0.003] * 4, {"leaf-2609": _parts(0.010, 0.006)})
    assert len(lines) == 1 + len(OVERHEAD_ROWS) and not any("/ farm-safe" in line for line in lines)


# --- sandbox_roundtrip: arguments and the table -----------------------------------------------


def test_roundtrip_takes_docker_and_refuses_it_with_starts_only(capsys: pytest.CaptureFixture[str]) -> None:
    a = roundtrip.parse_args(["--backend", "docker", "--starts", "1", "--execs", "4"])
    assert (a.backend, a.starts, a.execs, a.starts_only) == ("docker", 1, 4, False)
    assert roundtrip.parse_args([]).backend == "local"
    with pytest.raises(SystemExit) as e:
        roundtrip.parse_args(["--backend", "docker", "--starts-only"])
    assert e.value.code == 2 and "--starts-only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        roundtrip.parse_args(["--execs", "0"])


def test_the_start_rows_put_each_phase_under_the_whole_start() -> None:
    full = {name: float(i + 1) for i, name in enumerate(cb.PHASES)} | {"whole": 50.0}
    partial = {"whole": 70.0, cb.PHASES[0]: 3.0}  # an engine without an event log
    rows = roundtrip.start_rows([full, partial])
    assert [r[0] for r in rows] == ["sandbox start from a cached image", *(f"  {p}" for p in cb.PHASES)]
    assert rows[0][1:] == (2, [50.0, 70.0]) and rows[1][2] == [1.0, 3.0] and rows[3][2] == [3.0]
    lines = roundtrip.table(rows)
    assert lines[0].split() == ["operation", "n", "p50", "ms", "p95", "ms", "mean", "ms"]
    assert lines[1].split()[-3:] == ["50.00", "70.00", "60.00"]
    assert lines[1 + 1].split()[-4:] == ["2", "1.00", "3.00", "2.00"]


def test_a_row_without_samples_reads_n_a() -> None:
    (line,) = roundtrip.table([("  container start (created to started)", 2, [])])[1:]
    assert line.split()[-4:] == ["2", "n/a", "n/a", "n/a"]


# --- the container start's phases --------------------------------------------------------------


def test_phases_come_from_the_start_steps_the_events_and_the_first_answer() -> None:
    t0 = 100.0
    marks = [("podman image", 100.001), ("podman pull", 100.002), ("podman create", 100.040),
             ("podman create", 100.041), ("podman run", 100.600), ("agent ping", 100.760), ("pong", 101.000)]
    events = {"create": 100.650, "init": 100.700, "start": 100.720}
    got = cb.start_phases(marks, events, t0, 101.050, "podman")
    want = dict(zip(cb.PHASES, (39.0, 559.0, 50.0, 70.0, 40.0, 240.0, 50.0))) | {"whole": 1050.0}
    assert got.keys() == want.keys()
    assert all(abs(got[k] - want[k]) < 1e-6 for k in want), got


def test_without_events_the_container_phases_are_left_out_not_guessed() -> None:
    marks = [("docker image", 1.0), ("docker create", 1.1), ("docker run", 1.5), ("agent ping", 1.8),
             ("pong", 1.9)]
    got = cb.start_phases(marks, {}, 1.0, 2.0, "docker")
    assert set(got) == {cb.PHASES[0], cb.PHASES[1], cb.PHASES[5], cb.PHASES[6], "whole"}


def test_event_lines_give_the_first_time_of_each_status() -> None:
    out = ("create 1796643507753431302\ninit 1796643507818853441\nstart 1796643507828521508\n"
           "exec 1796643507900000000\nexec 1796643507950000000\nnot a line\n")
    got = cb.parse_events(out)
    assert set(got) == {"create", "init", "start", "exec"}
    assert got["exec"] == pytest.approx(1796643507.9) and got["create"] == pytest.approx(1796643507.753431302)


def test_the_bench_task_runs_on_the_podman_tests_image_without_network() -> None:
    task = cb.docker_task("overhead")
    assert (task.environment.image, task.agent_network, task.workdir) == (cb.BASE_IMAGE, "no-network", "/app")
