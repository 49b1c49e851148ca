"""Loading never loses a task silently and never loses the command to one bad task.

Real data where it exists (the 89 Terminal-Bench 2.0 tasks and the Harbor fixtures in
../shared), small task directories made here for each error path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.cli import main
from farm.config import load_config
from farm.errors import ConfigError
from farm.tasks.benchmark import load_benchmark_report
from farm.tasks.dockerfile import DockerfileUnsupported, check_replayable, parse_cached
from farm.tasks.harbor import load_harbor_task
from farm.tasks.loading import LoadReport
from tests.shared import shared_path
from tests.support.tasks import GOOD_TOML
from tests.support.tasks import make_task_files as make_task

TB2 = ("fixtures", "terminal-bench-2.0")


def load(*overrides: str):
    return load_benchmark_report(load_config(list(overrides)).benchmark)


# -- real data ---------------------------------------------------------------------------------


@pytest.mark.shared("fixtures/terminal-bench-2.0")
def test_all_89_terminal_bench_tasks_load() -> None:
    root = shared_path(*TB2)
    loaded = load(f"benchmark.path={root}")
    assert len(loaded.tasks) == 89 and loaded.report.failures == []
    by_id = {t.task_id: t for t in loaded.tasks}
    # the two multi-stage / COPY --from tasks that used to abort the load
    fin = by_id["financial-document-processor"]
    assert fin.environment.image == "alexgshaw/financial-document-processor:20251031"
    assert fin.workdir == "/app" and fin.environment.build_steps == ()  # the prebuilt image is used
    parsed = parse_cached(fin.environment.dockerfile)
    assert [(s.name, s.base) for s in parsed.stages] == [("build", "ubuntu:24.04"), ("target", "ubuntu:24.04")]
    assert set(parsed.base_images) == {"ubuntu:24.04", "ghcr.io/astral-sh/uv:0.8.14"}
    copies = [(s.from_stage, s.arg, s.line) for s in parsed.steps if s.kind == "copy"]
    assert copies == [("ghcr.io/astral-sh/uv:0.8.14", "/uv", 18), ("ghcr.io/astral-sh/uv:0.8.14", "/uvx", 18),
                      ("build", "/app/documents", 19)]
    # a backend that replays steps names the instruction it cannot honour, and why
    from dataclasses import replace
    as_built = replace(fin.environment, build_steps=parsed.steps, image=parsed.image)
    with pytest.raises(DockerfileUnsupported, match=r"Dockerfile line 18: COPY --from=ghcr.io/astral-sh/uv:0.8.14 "
                                                    r"/uv /bin/: copies from the filesystem .*\(and 2 more\)") as exc:
        check_replayable(as_built)
    assert exc.value.reason == "dockerfile_instruction"
    # ARG is a build-time variable for the RUN that follows, not a runtime one
    bn = parse_cached(by_id["bn-fit-modify"].environment.dockerfile)
    (arg,) = [s for s in bn.steps if s.build_only]
    assert (arg.kind, arg.arg, arg.line) == ("env", "BN_URL", 19) and arg.value.endswith("bn_sample_10k.csv")
    assert "BN_URL" not in bn.env


@pytest.mark.shared("fixtures/harbor")
@pytest.mark.parametrize("name,folder", [("swebench-verified", "swebench-verified"), ("swebench_pro", "swebench-pro"),
                                         ("terminal-bench-2", "terminal-bench-2")])
def test_a_local_copy_keeps_the_sources_rules(name: str, folder: str) -> None:
    path = shared_path("fixtures", "harbor", folder)
    loaded = load(f"benchmark={name}", f"benchmark.path={path}")
    assert loaded.tasks and loaded.report.failures == []
    plain = load(f"benchmark.path={path}").tasks
    for t, p in zip(loaded.tasks, plain):
        assert t.source.revision == ""  # not a git checkout of the pin: nothing claims it is
        assert t.source.url == str(path.resolve())
        if folder == "swebench-verified":
            assert t.benchmark == "swebench_verified"
            assert t.verifier.success_marker == "SWEBench results ends here"
            assert "@sha256:" in t.environment.image and "@" not in p.environment.image  # the digest lock
            assert t.require_git_patch and not p.require_git_patch
        elif folder == "terminal-bench-2":
            assert t.benchmark == "terminal_bench_2_verified" and not t.require_git_patch
        else:
            assert t.benchmark == "swebench_pro" and t.require_git_patch
        assert t.metadata["pod_prefix"]


# -- each task on its own ----------------------------------------------------------------------


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    root = tmp_path / "mixed"
    make_task(root, "a-good")
    make_task(root, "b-bad-toml", '[agent]\ntimeout_sec = 1\n[environment\ndocker_image = "x"\n')
    make_task(root, "c-no-test", test_sh=False)
    make_task(root, "d-bad-dockerfile", "[agent]\ntimeout_sec = 5\n",
              dockerfile="FROM python:3.12\nWORKDIR /app\nFETCH http://x /y\n")
    make_task(root, "e-good")
    make_task(root, "f-bad-value", '[agent]\ntimeout_sec = "soon"\n[environment]\ndocker_image = "x"\n')
    return root


def test_bad_tasks_are_reported_with_file_line_and_cause(mixed: Path) -> None:
    loaded = load(f"benchmark.path={mixed}")
    assert [t.task_id for t in loaded.tasks] == ["a-good", "e-good"]
    rep = loaded.report
    assert rep.candidates == 6
    assert rep.by_cause() == {"bad_toml": 1, "bad_value": 1, "dockerfile": 1, "missing_file": 1}
    got = {f.task: (f.file, f.line, f.cause) for f in rep.failures}
    assert got["b-bad-toml"] == (str(mixed / "b-bad-toml" / "task.toml"), 3, "bad_toml")
    assert got["c-no-test"] == (str(mixed / "c-no-test" / "tests" / "test.sh"), None, "missing_file")
    assert got["d-bad-dockerfile"] == (str(mixed / "d-bad-dockerfile" / "environment" / "Dockerfile"), 3, "dockerfile")
    assert got["f-bad-value"] == (str(mixed / "f-bad-value" / "task.toml"), 2, "bad_value")  # the line that sets it
    text = "\n".join(rep.lines())
    assert "4 of 6 task(s) failed to load (bad_toml 1, bad_value 1, dockerfile 1, missing_file 1)" in text
    assert f"{mixed / 'd-bad-dockerfile' / 'environment' / 'Dockerfile'}:3: [dockerfile] line 3: unknown " \
           "Dockerfile instruction FETCH" in text


def test_strict_fails_instead(mixed: Path) -> None:
    with pytest.raises(ConfigError, match=r"benchmark.strict=true and tasks failed to load:(.|\n)*b-bad-toml"):
        load(f"benchmark.path={mixed}", "benchmark.strict=true")
    assert main(["tasks", "list", f"benchmark.path={mixed}", "benchmark.strict=true"]) == 2
    for command in (["tasks", "list"], ["validate"], ["run", "-q"]):
        assert main([*command, "--strict", f"benchmark.path={mixed}", "run.executor=local",
                     f"store.uri={mixed.parent / 's'}"]) == 2
    assert not (mixed.parent / "s").exists()  # the run failed before it stored anything


def test_cli_lists_the_good_tasks_and_reports_the_rest(mixed: Path, capsys) -> None:
    assert main(["tasks", "list", f"benchmark.path={mixed}"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split("\t")[:2] == ["benchmark", "task_id"]
    assert [ln.split("\t")[1] for ln in lines[1:-1]] == ["a-good", "e-good"]
    assert lines[-1] == "# 2 tasks, 4 failed to load (listed on stderr)"
    assert f"b-bad-toml: {mixed / 'b-bad-toml' / 'task.toml'}:3: [bad_toml]" in err
    assert main(["tasks", "list", "--json", f"benchmark.path={mixed}"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [t["task_id"] for t in doc["tasks"]] == ["a-good", "e-good"]
    assert doc["load"]["failures_by_cause"] == {"bad_toml": 1, "bad_value": 1, "dockerfile": 1, "missing_file": 1}
    assert {f["task"]: f["line"] for f in doc["load"]["failures"]}["b-bad-toml"] == 3


def test_validate_reports_failures_at_the_end(mixed: Path, capsys) -> None:
    assert main(["validate", f"benchmark.path={mixed}"]) == 0
    out, err = capsys.readouterr()
    assert "2 tasks" in out and "[missing_file]" in err


def test_filters_apply_before_parsing(mixed: Path) -> None:
    # the broken tasks are never read when they are not selected
    only = load(f"benchmark.path={mixed}", "benchmark.task_ids=[e-good]")
    assert [t.task_id for t in only.tasks] == ["e-good"] and only.report.failures == []
    first = load(f"benchmark.path={mixed}", "benchmark.limit=1")
    assert [t.task_id for t in first.tasks] == ["a-good"] and first.report.candidates == 1
    with pytest.raises(ConfigError, match=r"\['nope'\] for 'benchmark.task_ids'"):
        load(f"benchmark.path={mixed}", "benchmark.task_ids=[nope]")


def test_sample_is_seeded_and_applies_before_limit(tmp_path: Path) -> None:
    root = tmp_path / "many"
    for i in range(20):
        make_task(root, f"t{i:02d}")
    a = [t.task_id for t in load(f"benchmark.path={root}", "benchmark.sample=5").tasks]
    b = [t.task_id for t in load(f"benchmark.path={root}", "benchmark.sample=5").tasks]
    c = [t.task_id for t in load(f"benchmark.path={root}", "benchmark.sample=5", "benchmark.sample_seed=7").tasks]
    assert a == b and len(a) == 5 and a == sorted(a) and a != c
    assert len(set(a) | set(c)) > 5
    assert [t.task_id for t in load(f"benchmark.path={root}", "benchmark.sample=5", "benchmark.limit=2").tasks] == a[:2]
    with pytest.raises(ConfigError, match="benchmark.sample"):
        load(f"benchmark.path={root}", "benchmark.sample=-1")


def test_task_id_honours_task_name(tmp_path: Path) -> None:
    root = tmp_path / "named"
    make_task(root, "dir-one", '[task]\nname = "terminal-bench/regex-log"\n' + GOOD_TOML)
    make_task(root, "dir-two", '[task]\nname = "other-org/regex-log"\n' + GOOD_TOML)
    make_task(root, "dir-three")
    loaded = load(f"benchmark.path={root}")
    assert sorted(t.task_id for t in loaded.tasks) == ["dir-three", "regex-log"]
    (dup,) = loaded.report.failures
    assert dup.cause == "duplicate_id" and dup.task == "dir-two" and "dir-one" in dup.message
    named = next(t for t in loaded.tasks if t.task_id == "regex-log")
    assert named.metadata["task_name"] == "terminal-bench/regex-log"
    # selectable by its declared id, though no directory has that name
    picked = load(f"benchmark.path={root}", "benchmark.task_ids=[regex-log]")
    assert [t.path.name for t in picked.tasks] == ["dir-one"]


def test_unhonoured_fields_are_counted_once_per_field(tmp_path: Path, capsys) -> None:
    root = tmp_path / "fields"
    extras = ('[solution.env]\nTOKEN = "x"\n[environment]\ndocker_image = "python:3.12"\ngpus = 1\n'
              'mcp_servers = [{name = "fs"}]\n')
    make_task(root, "one", extras)
    make_task(root, "two", extras.replace("gpus = 1", "gpus = 0"))
    make_task(root, "three", GOOD_TOML.replace("[agent]\n", "[agent]\nretries = 2\n"),
              files={"environment/docker-compose.yaml": "services: {main: {}}\n"})
    rep = load(f"benchmark.path={root}").report
    counts = {name: n for name, (_, n) in rep.unhonoured.items()}
    assert counts == {"solution.env": 2, "environment.gpus": 1, "environment.mcp_servers": 2,
                      "agent.retries": 1, "environment/docker-compose.yaml": 1}
    assert main(["tasks", "list", f"benchmark.path={root}"]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 5
    assert "warning: fields: environment.mcp_servers is used by 2 task(s): ignored" in err
    assert "agent.retries is used by 1 task(s): unknown field" in err


def test_a_compose_only_task_fails_with_its_cause(tmp_path: Path) -> None:
    root = tmp_path / "compose"
    make_task(root, "multi", "[agent]\ntimeout_sec = 5\n", files={"environment/docker-compose.yaml": "services: {}\n"})
    make_task(root, "ok")
    loaded = load(f"benchmark.path={root}")
    (f,) = loaded.report.failures
    assert f.cause == "unsupported_layout" and f.file.endswith("docker-compose.yaml")
    assert [t.task_id for t in loaded.tasks] == ["ok"]


def test_schema_1_4_fields_are_parsed_into_the_task(tmp_path: Path) -> None:
    toml = '''schema_version = "1.4"
[task]
name = "org/net"
[agent]
timeout_sec = 100
network_mode = "allowlist"
allowed_hosts = ["pypi.org", "*.pythonhosted.org"]
user = "agent"
[verifier]
timeout_sec = 40
network_mode = "public"
user = "root"
[verifier.environment]
docker_image = "python:3.13"
cpus = 2
memory_mb = 1024
[environment]
docker_image = "python:3.12"
memory_mb = 4096
healthcheck = {command = "test -f /ready", interval_sec = 2, retries = 5}
[solution]
env = {MODE = "oracle"}
'''
    report = LoadReport("x")
    t = load_harbor_task(make_task(tmp_path, "net", toml), "x", report=report)
    assert t.task_id == "net" and t.agent_timeout_s == 100 and t.verifier_timeout_s == 40
    # allowlist: the safe reading until a backend enforces it, with the hosts kept
    assert t.agent_network == "no-network" and t.agent_allowed_hosts == ("pypi.org", "*.pythonhosted.org")
    assert t.verifier_network == "public" and t.verifier.user == "root" and t.agent_user == "agent"
    hc = t.environment.healthcheck
    assert (hc.command, hc.interval_s, hc.timeout_s, hc.retries) == ("test -f /ready", 2.0, 30.0, 5)
    assert t.verifier.mode == "separate"
    ve = t.verifier.environment
    assert ve.image == "python:3.13" and ve.resources.cpus == 2 and ve.resources.memory_mb == 1024
    assert t.solution_env == {"MODE": "oracle"} and t.environment.resources.memory_mb == 4096
    assert set(report.unhonoured) >= {"network_mode=allowlist", "agent.allowed_hosts", "environment.healthcheck",
                                      "verifier.environment", "solution.env", "agent.user", "verifier.user"}


def test_a_windows_task_and_a_multi_step_task_fail_with_their_cause(tmp_path: Path) -> None:
    win = make_task(tmp_path / "w", "win", GOOD_TOML + 'os = "windows"\n')
    step = make_task(tmp_path / "s", "steps", GOOD_TOML + '[[steps]]\nname = "one"\n')
    (step / "instruction.md").unlink()
    for d in (win.parent, step.parent):
        (f,) = load(f"benchmark.path={d}").report.failures
        assert f.cause == "unsupported_layout"


def test_a_run_goes_on_and_lists_the_failures_at_the_end(mixed: Path, tmp_path: Path, capsys) -> None:
    from farm.store.results import ResultStore

    store = tmp_path / "store"
    assert main(["run", "-q", "agent=oracle", "run.executor=local", f"benchmark.path={mixed}",
                 f"store.uri={store}", "run.id=mixed"]) == 0
    err = capsys.readouterr().err
    assert "4 of 6 task(s) failed to load" in err and "d-bad-dockerfile" in err
    rows = ResultStore.open(str(store)).read_trials("mixed").to_pylist()
    assert sorted(r["task_id"] for r in rows) == ["a-good", "e-good"]  # the rest ran


@pytest.mark.shared("fixtures/terminal-bench-2.0")
def test_every_terminal_bench_dockerfile_parses_as_the_image_source() -> None:
    """Without docker_image each Dockerfile is the image: all 89 parse; replay refuses exactly two."""
    files = sorted(shared_path(*TB2).glob("*/environment/Dockerfile"))
    assert len(files) == 89
    parsed = {f.parent.parent.name: parse_cached(f) for f in files}
    from farm.tasks.dockerfile import replay_blockers

    refused = {name for name, p in parsed.items() if replay_blockers(p.steps)}
    assert refused == {"financial-document-processor", "reshard-c4-data"}
    bases = {p.image for p in parsed.values()}
    assert {"python:3.13-slim-bookworm", "ubuntu:24.04"} <= bases
    assert all(p.image and not p.image.startswith("$") for p in parsed.values())


def test_a_multi_stage_task_without_docker_image_loads_and_keeps_its_steps(tmp_path: Path) -> None:
    d = make_task(tmp_path / "ms", "two-stage", "[agent]\ntimeout_sec = 5\n", dockerfile=(
        "ARG PY=3.13\nFROM python:${PY}-slim AS build\nRUN <<EOF\necho '<?xml version=\"1.0\"?>' > /out.xml\nEOF\n"
        "FROM python:${PY}-slim\nCOPY --from=build /out.xml /app/\nWORKDIR /app\n"))
    (t,) = load(f"benchmark.path={d.parent}").tasks
    assert t.environment.image == "python:3.13-slim" and t.workdir == "/app"
    assert [(s.kind, s.from_stage) for s in t.environment.build_steps] == [("copy", "build"), ("workdir", "")]
    with pytest.raises(DockerfileUnsupported, match=r"Dockerfile line 7: COPY --from=build /out.xml /app/"):
        check_replayable(t.environment)
