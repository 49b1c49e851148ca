"""LocalSandbox: one bubblewrap namespace per trial on this machine.

Layout inside the sandbox: an empty read-only root; read-only binds of the host system
(/usr, the /bin /sbin /lib* links or dirs, /etc, /opt); a fresh /dev and /proc; private
writable directories from a host staging dir for /tmp, /root (HOME), /tests, /logs,
/solution and the top-level directory of every path the task works in (its workdir, WORKDIR
and COPY destinations: /app, /testbed, ...); the agent program read-only at /.farm/inside.
Nothing else of the host is visible. PID/IPC/UTS namespaces always, a network namespace when
the network mode is ``no-network``; capabilities are cut to the file-ownership set, so the
sandbox's root cannot remount or create devices.

The "image" is the host system: the task's Dockerfile is interpreted (WORKDIR, ENV, COPY,
RUN replayed in the sandbox), and FROM only selects whether that is acceptable. A task whose
image carries contents of its own (a SWE-bench environment image, say) cannot run here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from farm.config import LocalSandboxConfig, SandboxConfig
from farm.errors import ConfigError, TaskFormatError, UnsupportedTaskError
from farm.sandbox.base import (
    JAIL_CAPS,
    JAIL_ENV,
    Capabilities,
    GcReport,
    LimitEvents,
    SandboxClosedError,
    SandboxError,
    SandboxStartError,
    SandboxStats,
)
from farm.sandbox.channel import LINE_LIMIT, Channel
from farm.sandbox.channel_sandbox import ChannelSandboxMixin
from farm.sandbox.local.cgroups import CgroupLimits, CgroupUnavailable
from farm.sandbox.local.gc import CGROUPS_FILE, OWNER_FILE, _rmtree, _start_time, gc_local
from farm.sandbox.local.netns import SlirpNetwork
from farm.sandbox.local.policy import (  # noqa: F401  (check_image, image_repository: re-exported)
    BASE_PATH,
    PYTHON_ENV,
    check_image,
    image_repository,
    plan_local,
)
from farm.sandbox.replay import ResolvedStep, env_overrides, replay_build_steps, runtime_env
from farm.tasks.model import Task

log = logging.getLogger(__name__)

INSIDE_DIR = Path(__file__).resolve().parent.parent / "inside"
AGENT_MOUNT = "/.farm/inside"

LOG_SUBDIRS = ("verifier", "agent", "artifacts")

# Docker's default capability set minus NET_RAW (sniffing the host's network when it is
# shared), MKNOD (device nodes on a host-backed bind) and the audit/fcap/chroot extras.
KEEP_CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID",
             "CAP_NET_BIND_SERVICE")
# the agent's own, which every command drops (inside/jail.py): the jail's, and IPC_LOCK to pin
# the agent's pages against the commands' memory thrash (inside/contain.py pin_memory)
AGENT_CAPS = JAIL_CAPS + ("CAP_IPC_LOCK",)
PING_TIMEOUT_S = 30.0
_GC_DONE: set[str] = set()  # root dirs this process already collected
SHUTDOWN_TIMEOUT_S = 5.0
# `pip` in the FROM python:* environment: the system's pip module run by the venv's python
PIP_SHIM = f"""#!{PYTHON_ENV}/bin/python
import sys
try:
    from pip._internal.cli.main import main
except ImportError:
    sys.exit("farm: this host's python3 has no pip module, which the local backend's FROM python "
             "environment uses (Debian: apt-get install python3-pip)")
sys.exit(main())
"""


# --- bubblewrap -----------------------------------------------------------------------------


def agent_python() -> tuple[str, list[str]]:
    """The interpreter that runs the agent inside, and the binds it needs if not under /usr."""
    if os.access("/usr/bin/python3", os.X_OK):
        return "/usr/bin/python3", []
    exe = Path(sys.executable).resolve()
    prefix = Path(sys.base_prefix).resolve()
    if str(exe).startswith("/usr/"):
        return str(exe), []
    return str(exe), ["--ro-bind", str(prefix), str(prefix)]


def system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    args += ["--ro-bind", "/etc", "/etc"]
    if Path("/opt").is_dir():
        args += ["--ro-bind", "/opt", "/opt"]
    resolv = Path("/etc/resolv.conf")
    if resolv.is_symlink():  # e.g. systemd-resolved: make its target visible too
        target = resolv.resolve()
        if target.exists() and not str(target).startswith(("/etc/", "/usr/")):
            args += ["--ro-bind", str(target), str(target)]
    return args


# -I: a task's PYTHONPATH/PYTHONHOME must not leak into the agent (its commands still get
# them); -S: no site-packages scan, ~25 ms of every sandbox start
def bwrap_argv(
    staging_fs: Path, tops: list[str], workdir: str, network: str, hostname: str,
    *, own_netns: bool | None = None, resolv_conf: Path | None = None, info_fd: int | None = None,
    python_env: Path | None = None,
) -> list[str]:
    """``own_netns``: a private network namespace (always for no-network; for public when the
    sandbox gets user-mode networking instead of the host's). ``resolv_conf`` replaces
    /etc/resolv.conf; ``info_fd`` receives bwrap's JSON with the child's host pid;
    ``python_env``: a writable host directory mounted at :data:`PYTHON_ENV`."""
    python, python_binds = agent_python()
    argv = ["bwrap", "--tmpfs", "/"] + system_binds()
    argv += ["--dev", "/dev", "--proc", "/proc"]
    for top in tops:
        argv += ["--bind", str(staging_fs / top), f"/{top}"]
    argv += python_binds  # after /root: a pyenv prefix lives below it
    argv += ["--ro-bind", str(INSIDE_DIR), AGENT_MOUNT]
    if python_env is not None:
        argv += ["--bind", str(python_env), PYTHON_ENV]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", hostname]
    if own_netns if own_netns is not None else network == "no-network":
        argv += ["--unshare-net"]
    if resolv_conf is not None:
        argv += ["--ro-bind", str(resolv_conf), "/etc/resolv.conf"]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    for cap in KEEP_CAPS + AGENT_CAPS:
        argv += ["--cap-add", cap]
    argv += ["--setenv", JAIL_ENV, ",".join(AGENT_CAPS)]
    argv += ["--remount-ro", "/", "--chdir", workdir, "--", python, "-I", "-S", f"{AGENT_MOUNT}/server.py"]
    return argv


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:60] or "task"


# --- the sandbox ----------------------------------------------------------------------------


class LocalSandbox(ChannelSandboxMixin):
    """A bubblewrap sandbox driven through the sandbox-agent channel."""

    backend = "local"
    # bwrap grants the jail's caps (inside/jail.py); they also make the verifier's mount namespace
    capabilities = Capabilities(isolated_commands=True, private_verifier=True)

    def __init__(
        self,
        task: Task,
        *,
        network: str | None = None,
        root_dir: Path | None = None,
        allow_any_image: bool = False,
        limits: bool = True,
        public_network: str = "isolated",
    ) -> None:
        self.task = task
        if public_network not in ("isolated", "host"):
            raise ValueError(f"public_network must be 'isolated' or 'host', got {public_network!r}")
        # "isolated": internet through slirp4netns in a private netns, host loopback (Ray,
        # policy endpoints, anything on 127.0.0.1) unreachable; "host": the host's own network
        self.public_network = public_network
        self._net: SlirpNetwork | None = None
        self.network = network or task.agent_network
        if self.network not in ("public", "no-network"):
            raise ValueError(f"network must be 'public' or 'no-network', got {self.network!r}")
        self.root_dir = Path(root_dir) if root_dir else Path(tempfile.gettempdir()) / "farm-sandboxes"
        self.allow_any_image = allow_any_image
        self.limits = limits
        self.stats = SandboxStats()
        self.staging: Path | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.channel: Channel | None = None
        self._cgroups: CgroupLimits | None = None
        self._last_events: LimitEvents | None = None  # read just before the groups are removed
        self._workdir = task.environment.workdir or "/"
        self._env: dict[str, str] = {}
        self._started = False
        self._closed = False

    @property
    def _slirp(self) -> asyncio.subprocess.Process | None:
        """The slirp4netns process of an isolated public sandbox, once started."""
        return self._net.proc if self._net else None

    @property
    def pid(self) -> int | None:
        """Host pid of the bwrap process (its process group holds the sandbox)."""
        return self.proc.pid if self.proc else None

    async def __aenter__(self) -> LocalSandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise SandboxClosedError("sandbox was closed")
        if self._started:
            return
        t0 = time.monotonic()
        plan = plan_local(self.task, self.allow_any_image)
        self.task, steps = plan.task, plan.steps  # a prebuilt-image task is built from its Dockerfile
        self.stats.image = plan.provenance
        self._started = True
        try:
            self.stats.note_step("bwrap launch")
            await self._launch(plan.env, steps, plan.tops, python_env=plan.python_env)
            if plan.python_env:
                self.stats.note_step("python env")
                await self._make_python_env()
            await replay_build_steps(self, self.task, steps)
        except BaseException as e:
            await self.close()
            if isinstance(e, (SandboxError, TaskFormatError, UnsupportedTaskError)) or not isinstance(e, Exception):
                raise
            raise SandboxStartError(f"task {self.task.task_id}: local sandbox failed to start: {e!r}") from e
        for s in steps:
            if s.kind == "workdir":
                self._workdir = s.path
        self._env = {**runtime_env(steps), **env_overrides(self.task)}
        self.stats.start_s = time.monotonic() - t0
        self.stats.requests = self.channel.requests if self.channel else 0

    async def _make_python_env(self) -> None:
        """A venv of the sandbox's python3 at PYTHON_ENV (policy.py says why), seeing the system's
        packages, with ``pip`` commands that run the system's pip module inside it: pip treats
        a venv as its own, so PEP 668's marker does not apply, and installs land in the venv."""
        res = await self.exec(f"python3 -m venv --without-pip --system-site-packages {PYTHON_ENV} && "
                              f"{PYTHON_ENV}/bin/python -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'",
                              timeout_s=120, cwd="/", merge_stderr=True)
        if res.exit_code != 0:
            raise SandboxStartError(f"task {self.task.task_id}: FROM python: could not make the python environment "
                                    f"at {PYTHON_ENV}: {res.output[-1500:]}", reason="python_env")
        version = res.output.strip().splitlines()[-1]
        for name in ("pip", "pip3", f"pip{version}"):
            await self.write_file(f"{PYTHON_ENV}/bin/{name}", PIP_SHIM.encode(), mode=0o755)

    async def _launch(self, base_env: dict[str, str], steps: list[ResolvedStep], tops: list[str], *,
                      python_env: bool = False) -> None:
        self.root_dir.mkdir(parents=True, exist_ok=True)
        root_key = str(self.root_dir.resolve())
        if root_key not in _GC_DONE:
            # a driver killed with SIGKILL never ran close(): its sandboxes died with it
            # (--die-with-parent) but their staging dirs and cgroups remain until collected
            _GC_DONE.add(root_key)
            try:
                gone = await asyncio.to_thread(gc_local, self.root_dir)
                if gone:
                    log.info("removed %d leftovers of dead sandboxes under %s", len(gone), self.root_dir)
            except OSError as e:
                log.warning("could not collect dead sandboxes under %s: %s", self.root_dir, e)
        self.staging = Path(tempfile.mkdtemp(prefix=_safe_name(self.task.task_id) + "-", dir=self.root_dir))
        fs = self.staging / "fs"
        for top in tops:
            (fs / top).mkdir(parents=True, exist_ok=True)
        for sub in LOG_SUBDIRS:
            (fs / "logs" / sub).mkdir(exist_ok=True)
        (fs / "tmp").chmod(0o1777)
        # bwrap chdirs before any WORKDIR step runs: the workdirs must exist already
        for path in [self.task.environment.workdir] + [s.path for s in steps if s.kind == "workdir"]:
            (fs / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
        first_workdir = self.task.environment.workdir or "/"
        net = None
        if self.network == "public" and self.public_network == "isolated":
            net = self._net = SlirpNetwork(self.staging, f"task {self.task.task_id}")
        pyenv = self.staging / "python" if python_env else None
        if pyenv is not None:
            pyenv.mkdir()
        argv = bwrap_argv(fs, tops, first_workdir, self.network, "sandbox", own_netns=net is not None or None,
                          resolv_conf=net.resolv_conf if net else None, info_fd=net.info_fd if net else None,
                          python_env=pyenv)
        env, cgroup_fds = base_env, []
        if self.limits:
            try:
                self._cgroups = CgroupLimits.create(self.staging.name, self.task.environment.resources)
                self.stats.extra["limits"] = self._cgroups.describe()
                (self.staging / CGROUPS_FILE).write_text("".join(f"{d}\n" for d in self._cgroups.dirs))
                argv = self._cgroups.wrap(argv)
                cgroup_fds, handed = self._cgroups.hand_over()
                env = {**base_env, **handed}
            except CgroupUnavailable as e:
                self.stats.extra["limits"] = f"unavailable: {e}"
        else:
            self.stats.extra["limits"] = "disabled"
        self._stderr_path = self.staging / "agent.stderr"
        try:
            with open(self._stderr_path, "wb") as err:
                self.proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=err,
                    env=env,
                    cwd="/",  # bwrap keeps its own start directory in PWD: nothing of the host's
                    start_new_session=True,
                    limit=LINE_LIMIT,
                    pass_fds=((net.info_fd,) if net else ()) + tuple(cgroup_fds),
                )
        finally:
            for fd in cgroup_fds:  # the sandbox holds its own copies now
                os.close(fd)
        if net:
            net.spawned()
        (self.staging / OWNER_FILE).write_text(f"{self.proc.pid} {_start_time(self.proc.pid)}\n")
        self.channel = Channel(self.proc.stdout, self.proc.stdin,  # type: ignore[arg-type]
                               name=f"sandbox {self.task.task_id}", describe_loss=self._describe_loss)
        self.channel.start()
        self.stats.note_step("agent ping")
        try:
            pong = await self.channel.request("ping", timeout=PING_TIMEOUT_S)
            self.stats.isolation = pong.get("agent_isolation") if isinstance(pong, dict) else None
        except SandboxError as e:
            raise SandboxStartError(f"task {self.task.task_id}: the sandbox agent did not come up: {e}",
                                    reason="agent") from None
        if net:
            # only now: before the agent answered, bwrap may still be setting up the
            # namespace's loopback, and slirp4netns racing it kills bwrap (netns.py)
            try:
                await net.start()
            except SandboxStartError as e:
                e.reason = e.reason or "network"
                raise
            self.stats.extra["network"] = net.describe()

    def _stderr_tail(self, n: int = 2000) -> str:
        try:
            data = Path(self._stderr_path).read_bytes()[-n:]
        except (OSError, AttributeError):
            return ""
        return data.decode("utf-8", "replace").strip()

    def _describe_loss(self) -> str:
        code = self.proc.returncode if self.proc else None
        parts = [f"bwrap exit status {code}" if code is not None else "bwrap still running"]
        tail = self._stderr_tail()
        if tail:
            parts.append(f"stderr tail: {tail}")
        return "; ".join(parts)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.channel is not None:
            if self.channel.lost is None and self.proc is not None and self.proc.returncode is None:
                try:
                    await self.channel.request("shutdown", timeout=SHUTDOWN_TIMEOUT_S)
                except Exception:
                    pass  # killing below is what guarantees the outcome
            self.stats.requests = self.channel.requests
            await self.channel.close()
        if self.proc is not None:
            if self.proc.returncode is None:
                try:
                    await asyncio.wait_for(self.proc.wait(), 2.0)
                except TimeoutError:
                    pass
            if self.proc.returncode is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                await self.proc.wait()
        if self._net is not None:
            await self._net.close()
        if self._cgroups is not None:
            self.stats.cpu_s = self._cgroups.cpu_seconds()
            self._last_events = self._cgroups.events()
            await asyncio.to_thread(self._cgroups.remove)
        if self.staging is not None:
            await asyncio.to_thread(_rmtree, self.staging)

    async def limit_events(self) -> LimitEvents | None:
        """What the sandbox's cgroups did (cgroups.py), also once it is lost or closed; None
        where it ran without them."""
        if self._cgroups is None:
            return None
        return self._last_events if self._last_events is not None else self._cgroups.events()

    # --- operations -------------------------------------------------------------------------

    def _ch(self) -> Channel:
        if self._closed:
            raise SandboxClosedError(f"sandbox for task {self.task.task_id} is closed")
        if self.channel is None:
            raise SandboxError(f"sandbox for task {self.task.task_id} was not started")
        return self.channel


class LocalBackend:
    """``sandbox.backend=local`` for the registry (farm/sandbox/registry.py)."""

    name = "local"

    def open(self, task: Task, cfg: SandboxConfig, *, network: str | None, run_id: str, trial_key: str,
             attempt: int, role: str) -> LocalSandbox:
        local = cfg.local  # a bwrap sandbox is named by its staging dir, not by the trial
        return LocalSandbox(task, network=network, root_dir=_root(local), allow_any_image=local.allow_any_image,
                            limits=local.limits, public_network=local.public_network)

    def check_task(self, task: Task, cfg: SandboxConfig) -> None:
        plan_local(task, cfg.local.allow_any_image)

    def check_environment(self, cfg: SandboxConfig) -> None:
        # slirp4netns is needed only by public-network tasks: its absence fails their start
        if shutil.which("bwrap") is None:
            raise ConfigError("sandbox.backend=local needs 'bwrap' on PATH (Debian package bubblewrap)")

    def gc(self, cfg: SandboxConfig, is_run_alive: Callable[[str], bool], *, dry_run: bool = False) -> GcReport:
        # liveness is the sandbox's own bwrap process, not the run's heartbeat
        report = GcReport()
        for path in gc_local(_root(cfg.local), dry_run=dry_run):
            report.add("cgroup" if path.startswith("/sys/") else "directory", path)
        return report


def _root(local: LocalSandboxConfig) -> Path | None:
    return Path(os.path.expanduser(local.root_dir)) if local.root_dir else None


BACKEND = LocalBackend()
