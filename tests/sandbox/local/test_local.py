"""The conformance suite and the local-only guarantees, against real bubblewrap sandboxes."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import uuid
from pathlib import Path

import pytest

import farm.sandbox.local.sandbox as local
from farm.errors import UnsupportedTaskError
from farm.sandbox.base import Sandbox, SandboxStartError, ToolRequest
from farm.sandbox.local.gc import _start_time
from farm.sandbox.local.sandbox import LocalSandbox, check_image, image_repository
from farm.tasks.model import BuildStep, Resources, Task
from tests.support.tasks import make_task

from ..conformance import SandboxConformance

pytestmark = pytest.mark.bwrap


def _is_zombie(pid: int) -> bool:
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return data[data.rindex(")") + 2] in "ZX"


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            data = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        ppid = int(data[data.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


class LocalBackend:
    # public sandboxes get user-mode networking in their own netns: host loopback is unreachable
    shares_host_loopback = False

    def __init__(self, root_dir: Path) -> None:
        self.root_dir = root_dir

    def make(self, task: Task, network: str) -> Sandbox:
        return LocalSandbox(task, network=network, root_dir=self.root_dir)

    async def kill_from_outside(self, sandbox: Sandbox) -> None:
        assert isinstance(sandbox, LocalSandbox) and sandbox.pid
        os.kill(sandbox.pid, signal.SIGKILL)

    def processes(self, sandbox: Sandbox) -> list[tuple[int, str | None]]:
        assert isinstance(sandbox, LocalSandbox) and sandbox.pid
        return [(p, _start_time(p)) for p in _descendants(sandbox.pid)]

    def still_running(self, identities: list[tuple[int, str | None]]) -> list[tuple[int, str | None]]:
        # a zombie runs nothing; bwrap's namespace init is one until the host's init reaps it
        return [(p, st) for p, st in identities if _start_time(p) == st and not _is_zombie(p)]


@pytest.fixture
def sandbox_root(tmp_path: Path) -> Path:
    return tmp_path / "sandboxes"


class TestLocalConformance(SandboxConformance):
    @pytest.fixture
    def backend(self, sandbox_root: Path) -> LocalBackend:
        return LocalBackend(sandbox_root)


# --- local-only guarantees --------------------------------------------------------------------


async def test_host_is_not_visible(sandbox_root: Path) -> None:
    host_tmp = Path("/tmp") / f"farm-host-{uuid.uuid4().hex}"
    host_tmp.write_text("host secret\n")
    try:
        async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
            r = await sb.exec(f"test -e /work; echo work=$?; test -e {host_tmp}; echo tmp=$?; ls -A /root; "
                              "ls /home 2>&1 | head -1")
            assert "work=1" in r.stdout and "tmp=1" in r.stdout
            assert ".pyenv" not in r.stdout and "No such file" in r.stdout
            # the host's own files next to the workspace, e.g. this checkout, are absent too
            assert (await sb.exec(f"test -e {Path(__file__).resolve()}")).exit_code == 1
            # the sandbox's /tmp is its own: writing the same path there leaves the host's alone
            assert (await sb.exec(f"echo changed > {host_tmp} && cat {host_tmp}")).stdout == "changed\n"
    finally:
        assert host_tmp.read_text() == "host secret\n"
        host_tmp.unlink()


async def test_writes_stay_in_the_staging_dir(sandbox_root: Path) -> None:
    name = f"written-{uuid.uuid4().hex}"
    sb = LocalSandbox(make_task(workdir="/srv/work"), root_dir=sandbox_root)
    await sb.start()
    assert sb.staging is not None and sb.staging.parent == sandbox_root
    await sb.exec(f"echo data > /srv/work/{name}; echo t > /tmp/{name}; echo r > /root/{name}")
    assert (sb.staging / "fs" / "srv" / "work" / name).read_text() == "data\n"
    for host_path in (Path("/srv/work") / name, Path("/tmp") / name, Path("/root") / name, Path("/app") / name):
        assert not host_path.exists(), host_path
    staging = sb.staging
    await sb.close()
    assert not staging.exists()
    assert list(sandbox_root.iterdir()) == []


async def test_unsupported_image_raises_with_the_image_name(sandbox_root: Path) -> None:
    image = "swebench/sweb.eval.x86_64.django_1776_django-13401:latest"
    sb = LocalSandbox(make_task(image=image), root_dir=sandbox_root)
    with pytest.raises(UnsupportedTaskError, match="swebench/sweb.eval.x86_64.django_1776_django-13401") as e:
        await sb.start()
    assert "allow_any_image" in str(e.value)
    assert sb.pid is None and not sandbox_root.exists() or list(sandbox_root.iterdir()) == []
    # the escape hatch runs it on the host system anyway
    async with LocalSandbox(make_task(image=image), root_dir=sandbox_root, allow_any_image=True) as ok:
        assert (await ok.exec("echo up")).stdout == "up\n"


@pytest.mark.parametrize(
    "image,generic",
    [
        ("python:3.13-slim-bookworm", True),
        ("ubuntu:24.04", True),
        ("docker.io/library/debian:bookworm@sha256:abc", True),
        ("buildpack-deps:jammy", True),
        (None, True),
        ("alexgshaw/fix-git:latest", False),
        ("ghcr.io/laude-institute/t-bench/python:3.11", False),
        ("jefzda/sweap-images:gravitational.teleport-x", False),
        ("myregistry.local:5000/python:3.11", False),
    ],
)
def test_image_allowlist(image: str | None, generic: bool) -> None:
    task = make_task(image=image)
    if generic:
        check_image(task)
    else:
        with pytest.raises(UnsupportedTaskError, match="needs the contents of image") as refused:
            check_image(task)
        assert refused.value.reason == "image_refused"


def test_image_repository_parsing() -> None:
    assert image_repository("python:3.11") == "python"
    assert image_repository("library/ubuntu") == "ubuntu"
    assert image_repository("swebench/sweb.eval.x86_64.django:latest") == "swebench/sweb.eval.x86_64.django"


async def test_workdir_below_a_system_dir_is_unsupported(sandbox_root: Path) -> None:
    with pytest.raises(UnsupportedTaskError, match="/usr/src/app"):
        task = make_task(build_steps=(BuildStep("workdir", "/usr/src/app"),))
        await LocalSandbox(task, root_dir=sandbox_root).start()


async def test_package_install_step_fails_with_a_hint(sandbox_root: Path) -> None:
    task = make_task(network="no-network",
                     build_steps=(BuildStep("run", "apt-get install -y --no-download nonexistent-pkg-farm"),))
    with pytest.raises(SandboxStartError, match="packages must already be installed on the host"):
        await LocalSandbox(task, root_dir=sandbox_root).start()
    assert list(sandbox_root.iterdir()) == []


async def test_memory_and_pids_limits_apply(sandbox_root: Path) -> None:
    task = make_task(resources=Resources(memory_mb=96, pids=64, cpus=1.0))
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        limits = sb.stats.extra["limits"]
        if limits.startswith("unavailable"):
            pytest.skip(f"no writable cgroups here: {limits}")
        assert "memory=96MiB" in limits and "pids=64" in limits
        hog = await sb.exec("python3 -c \"b = bytearray(400 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); "
                            "print('survived')\"", timeout_s=60)
        assert "survived" not in hog.stdout and hog.exit_code != 0
        forks = await sb.exec("for i in $(seq 100); do sleep 1 & done 2>&1; wait", timeout_s=30, merge_stderr=True)
        assert "Resource temporarily unavailable" in forks.stdout
        await sb.exec("python3 -c 'import time\nt=time.time()\nwhile time.time()-t<0.5: pass'")
    assert sb.stats.cpu_s is not None and sb.stats.cpu_s >= 0.4
    cg_names = [p for p in Path("/sys/fs/cgroup/memory").rglob(f"farm-{sb.staging.name}")] if sb.staging else []
    assert cg_names == []


async def test_limits_off_records_it(sandbox_root: Path) -> None:
    async with LocalSandbox(make_task(), root_dir=sandbox_root, limits=False) as sb:
        assert sb.stats.extra["limits"] == "disabled"
        assert (await sb.exec("echo ok")).stdout == "ok\n"


async def test_stats_count_start_time_and_requests(sandbox_root: Path) -> None:
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        assert 0 < sb.stats.start_s < 30
        before = sb.stats.requests
        await sb.exec("true")
        await sb.read_file("/.farm/inside/server.py")
        assert sb.stats.requests == before + 2


async def test_agent_runs_under_a_python_outside_usr(sandbox_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Python such as pyenv's (below /root) gets its prefix bound read-only."""
    if str(Path(sys.executable).resolve()).startswith("/usr/"):
        pytest.skip("this interpreter lives below /usr")
    real_access = os.access
    monkeypatch.setattr(local.os, "access", lambda p, m: False if p == "/usr/bin/python3" else real_access(p, m))
    exe, binds = local.agent_python()
    assert exe == str(Path(sys.executable).resolve()) and str(Path(sys.base_prefix).resolve()) in binds
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        pong = await sb.call("ping")
        assert pong["python"] == ".".join(str(n) for n in sys.version_info[:3])
        assert (await sb.exec("touch /root/ok")).exit_code == 0


async def test_gc_removes_what_a_crashed_driver_left(sandbox_root: Path) -> None:
    sb = LocalSandbox(make_task(), root_dir=sandbox_root)
    await sb.start()
    live = LocalSandbox(make_task(), root_dir=sandbox_root)
    await live.start()
    try:
        assert sb.staging is not None and live.staging is not None
        # simulate a crash: the sandbox dies but nobody closes it
        os.killpg(sb.pid, signal.SIGKILL)  # type: ignore[arg-type]
        await sb.proc.wait()  # type: ignore[union-attr]
        cgroups = list(sb._cgroups.dirs) if sb._cgroups else []
        removed = local.gc_local(sandbox_root)
        assert str(sb.staging) in removed and not sb.staging.exists()
        assert all(not d.exists() for d in cgroups)
        assert live.staging.exists() and (await live.exec("echo alive")).stdout == "alive\n"
    finally:
        await live.close()
        await sb.close()


async def test_tool_op_reaches_leaf_tools_inside_bwrap(sandbox_root: Path) -> None:
    if not (local.INSIDE_DIR / "leaf_tools.py").exists():
        pytest.skip("leaf_tools.py is not in farm/sandbox/inside yet")
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        res = await sb.tool(ToolRequest("Bash", {"command": "echo from-tool; pwd"}, "/app"))
        assert "from-tool" in res.observation and "/app" in res.observation and res.error is None
        missing = await sb.tool(ToolRequest("Read", {"file_path": "/app/none.txt"}, "/app"))
        assert missing.error is not None and missing.observation.startswith(missing.error)
        assert (await sb.stat("/app")).is_dir and not (await sb.stat("/app/none.txt")).exists


async def test_first_start_collects_leftovers(tmp_path: Path) -> None:
    root = tmp_path / "fresh-root"
    dead = root / "crashed-abc"
    (dead / "fs" / "app").mkdir(parents=True)
    (dead / local.OWNER_FILE).write_text("999999999 1\n")  # no such process
    async with LocalSandbox(make_task(), root_dir=root) as sb:
        assert not dead.exists()
        assert sb.staging is not None and sb.staging.exists()


async def test_dockerfile_env_is_expanded_once_for_exec_and_tools(sandbox_root: Path) -> None:
    """The loader copies raw ENV values into environment.env; they must not be exported raw."""
    steps = (BuildStep("env", "PATH", "/root/bin:$PATH"), BuildStep("env", "MODE", "image"),
             BuildStep("env", "KEEP", "k"))
    env = {"PATH": "/root/bin:$PATH", "MODE": "toml-override", "KEEP": "k", "LITERAL": "$NOT_EXPANDED"}
    task = make_task(build_steps=steps, env=env)
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        want = f"/root/bin:{local.BASE_PATH}|toml-override|k|$NOT_EXPANDED"
        r = await sb.exec('echo "$PATH|$MODE|$KEEP|$LITERAL"')
        assert r.stdout == want + "\n"
        if (local.INSIDE_DIR / "leaf_tools.py").exists():
            # KEEP reaches the tool only through the injected limits.env (PATH is left out:
            # the Bash tool runs a login shell, and Debian's /etc/profile resets PATH)
            res = await sb.tool(ToolRequest("Bash", {"command": 'echo "$MODE|$KEEP|$LITERAL"'}, "/app"))
            assert "toml-override|k|$NOT_EXPANDED" in res.observation


async def test_public_network_is_isolated_from_host_loopback(tmp_path: Path) -> None:
    """A public sandbox gets its own network namespace with user-mode networking (slirp4netns):
    it has a configured interface, a resolver, and no way to reach services on the host's
    127.0.0.1 (the Ray head, policy endpoints, ...). `public_network=host` shares the host's."""
    from ..conformance import LoopbackServer, connect_script

    if shutil.which("slirp4netns") is None:
        pytest.skip("slirp4netns is not installed")
    server = LoopbackServer()
    isolated = LocalSandbox(make_task(network="public"), root_dir=tmp_path)
    shared = LocalSandbox(make_task(network="public"), root_dir=tmp_path, public_network="host")
    try:
        await isolated.start()
        r = await isolated.exec(connect_script(server.port), timeout_s=20)
        assert r.exit_code == 1 and "FAILED" in r.stdout, r.output
        routes = await isolated.exec("cat /proc/net/route; cat /etc/resolv.conf")
        assert "tap0" in routes.stdout and "nameserver 10.0.2.3" in routes.stdout, routes.output
        assert "slirp4netns" in isolated.stats.extra["network"]
        await shared.start()
        ok = await shared.exec(connect_script(server.port), timeout_s=20)
        assert ok.exit_code == 0 and f"GOT {server.token}" in ok.stdout, ok.output
        assert server.accepted == 1  # only the host-network sandbox got through
        slirp = isolated._slirp
    finally:
        await isolated.close()
        await shared.close()
        server.close()
    assert slirp is not None and slirp.returncode is not None  # nothing left running


async def test_an_arg_reaches_the_build_steps_but_not_the_running_sandbox(sandbox_root: Path) -> None:
    steps = (BuildStep("env", "VERSION", "1.2", build_only=True), BuildStep("env", "KEPT", "k"),
             BuildStep("run", 'echo "$VERSION" > /app/built-with'))
    async with LocalSandbox(make_task(build_steps=steps), root_dir=sandbox_root) as sb:
        assert (await sb.read_file("/app/built-with")) == b"1.2\n"
        assert (await sb.exec('echo "[$VERSION|$KEPT]"')).stdout == "[|k]\n"
