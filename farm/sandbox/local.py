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
import glob
import logging
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

from farm.errors import TaskFormatError, UnsupportedTaskError
from farm.sandbox.base import (
    SandboxClosedError,
    SandboxError,
    SandboxStartError,
    SandboxStats,
)
from farm.sandbox.channel_sandbox import ChannelSandboxMixin
from farm.sandbox.channel import LINE_LIMIT, Channel
from farm.tasks.model import Environment, Resources, Task

log = logging.getLogger(__name__)

INSIDE_DIR = Path(__file__).resolve().parent / "inside"
AGENT_MOUNT = "/.farm/inside"

# Official images whose contents the host system can stand in for (a Debian-like userland
# with Python). Anything else carries contents of its own that only a container can provide.
GENERIC_IMAGES = frozenset({"python", "ubuntu", "debian", "buildpack-deps", "bash"})

# Top-level directories that come read-only from the host; the task may not write below them.
READ_ONLY_TOPS = frozenset({"usr", "etc", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "dev", "proc", "sys", ".farm"})
ALWAYS_WRITABLE = ("tmp", "root", "tests", "logs", "solution")
LOG_SUBDIRS = ("verifier", "agent", "artifacts")

BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Docker's default capability set minus NET_RAW (sniffing the host's network when it is
# shared), MKNOD (device nodes on a host-backed bind) and the audit/fcap/chroot extras.
KEEP_CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_NET_BIND_SERVICE")
PING_TIMEOUT_S = 30.0
OWNER_FILE = "bwrap.pid"  # "<pid> <start time>" of the sandbox's bwrap, for gc_local
_GC_DONE: set[str] = set()  # root dirs this process already collected
CGROUPS_FILE = "cgroups"  # the sandbox's cgroup directories, one a line, for gc_local
SHUTDOWN_TIMEOUT_S = 5.0
PACKAGE_MANAGERS = re.compile(r"\b(apt-get|apt|apk|yum|dnf|microdnf|zypper|pacman)\b")


# --- FROM -----------------------------------------------------------------------------------


def image_repository(image: str) -> str:
    """``docker.io/library/python:3.11-slim@sha256:..`` -> ``python``; keeps namespaces."""
    ref = image.split("@", 1)[0]
    parts = ref.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry, parts = parts[0], parts[1:]
        if registry not in ("docker.io", "index.docker.io", "registry-1.docker.io"):
            return ref.rsplit(":", 1)[0] if ":" in parts[-1] else ref
    if len(parts) == 2 and parts[0] == "library":
        parts = parts[1:]
    last = parts[-1].split(":", 1)[0]
    return "/".join(parts[:-1] + [last])


def check_image(task: Task, allow_any_image: bool = False) -> None:
    """Raise UnsupportedTaskError when the task needs an image's contents."""
    image = task.environment.image
    if image is None or allow_any_image or image_repository(image) in GENERIC_IMAGES:
        return
    raise UnsupportedTaskError(
        f"task {task.task_id} needs the contents of image {image}; the local backend runs tasks "
        "on the host system — use sandbox=docker or sandbox=kubernetes, or set "
        "sandbox.local.allow_any_image=true"
    )


# --- Dockerfile interpretation --------------------------------------------------------------

_VAR = re.compile(r"\\\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Dockerfile variable substitution: $VAR, ${VAR}, ${VAR:-default}, ${VAR:+alt}, \\$."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "\\$":
            return "$"
        name = m.group(1) or m.group(4)
        cur = env.get(name, "")
        if m.group(2) == "-":
            return cur or m.group(3)
        if m.group(2) == "+":
            return m.group(3) if cur else ""
        return cur

    return _VAR.sub(sub, value)


@dataclass(frozen=True)
class ResolvedStep:
    index: int
    kind: str
    text: str  # the instruction as the task wrote it, for error messages
    workdir: str  # WORKDIR in effect
    env: Mapping[str, str]  # ENV instructions in effect (expanded), beyond the base env
    path: str = ""  # workdir / copy destination (absolute)
    src: str = ""  # copy source (relative to the build context)
    into: bool = False  # copy destination named a directory ("dest/")
    command: str = ""  # run


def resolve_build_steps(task: Task, base_env: Mapping[str, str]) -> list[ResolvedStep]:
    """Expand variables and relative paths of the task's build steps without running them."""
    envr = task.environment
    workdir = envr.workdir or "/"
    added: dict[str, str] = {}
    out: list[ResolvedStep] = []
    for i, step in enumerate(envr.build_steps, 1):
        scope = {**base_env, **added}
        text = f"{step.kind.upper()} {step.arg}" + (f" {step.value}" if step.value else "")
        if step.kind == "workdir":
            workdir = _abspath(expand(step.arg, scope), workdir)
            out.append(ResolvedStep(i, "workdir", text, workdir, dict(added), path=workdir))
        elif step.kind == "env":
            added[step.arg] = expand(step.value, scope)
            out.append(ResolvedStep(i, "env", text, workdir, dict(added)))
        elif step.kind == "copy":
            raw = expand(step.value, scope)
            dest = _abspath(raw, workdir)
            out.append(
                ResolvedStep(i, "copy", text, workdir, dict(added), path=dest, src=step.arg, into=raw.endswith("/") or raw in (".", "./"))
            )
        elif step.kind == "run":
            out.append(ResolvedStep(i, "run", text, workdir, dict(added), command=step.arg))
        else:
            raise TaskFormatError(task.path or task.task_id, f"build step {i}: unknown kind {step.kind!r}")
    return out


def literal_task_env(task: Task) -> dict[str, str]:
    """The part of ``environment.env`` that no ENV build step sets.

    The task loader copies the Dockerfile's ENV values, unexpanded, into ``environment.env``
    (``PATH=/root/.local/bin:$PATH`` included); those must come from the expanded ENV steps,
    not be exported raw. What remains (task.toml's env, or a task.toml value overriding an
    ENV) is literal. Environment = base + this + the expanded ENV steps + :func:`env_overrides`.
    """
    raw_steps = {s.arg: s.value for s in task.environment.build_steps if s.kind == "env"}
    return {k: v for k, v in task.environment.env.items() if raw_steps.get(k) != v}


def env_overrides(task: Task) -> dict[str, str]:
    """task.toml values that override an ENV step of the same name (applied last)."""
    raw_steps = {s.arg: s.value for s in task.environment.build_steps if s.kind == "env"}
    return {k: v for k, v in task.environment.env.items() if k in raw_steps and raw_steps[k] != v}


def _abspath(path: str, base: str) -> str:
    p = PurePosixPath(base) / path if not path.startswith("/") else PurePosixPath(path)
    return os.path.normpath(str(p)).replace("//", "/")


def _top(path: str) -> str:
    parts = PurePosixPath(path).parts
    return parts[1] if len(parts) > 1 else ""


def writable_tops(task: Task, steps: list[ResolvedStep]) -> list[str]:
    """The top-level directories that get a private writable bind, checked for conflicts."""
    tops = list(ALWAYS_WRITABLE)
    wanted = [("workdir", task.environment.workdir)] + [
        (s.text, s.path) for s in steps if s.kind in ("workdir", "copy")
    ]
    for what, path in wanted:
        top = _top(path)
        if not top:
            raise UnsupportedTaskError(f"task {task.task_id}: {what} targets the root directory {path!r}; the local backend only writes below a top-level directory")
        if top in READ_ONLY_TOPS:
            raise UnsupportedTaskError(
                f"task {task.task_id}: {what} writes below /{top} ({path}), which the local "
                "backend mounts read-only from the host; use sandbox=docker or sandbox=kubernetes"
            )
        if top not in tops:
            tops.append(top)
    return tops


async def replay_build_steps(sandbox: Any, task: Task, steps: list[ResolvedStep]) -> None:
    """Apply WORKDIR/ENV/COPY/RUN through any Sandbox (backend-agnostic).

    RUN steps execute in the sandbox with the sandbox's own network setting: a no-network
    task cannot download anything while it is being built.
    """
    envr: Environment = task.environment
    for step in steps:
        if step.kind == "workdir":
            await sandbox.exec(f"mkdir -p {shlex.quote(step.path)}", timeout_s=60, cwd="/")
        elif step.kind == "copy":
            await _copy(sandbox, task, step)
        elif step.kind == "run":
            res = await sandbox.exec(
                step.command, timeout_s=envr.build_timeout_s, cwd=step.workdir, env=step.env, merge_stderr=True, output_cap=64 << 10
            )
            if res.exit_code != 0:
                why = f"timed out after {envr.build_timeout_s:.0f} s" if res.timed_out else f"exited with code {res.exit_code}"
                tail = res.output[-3000:]
                hint = ""
                if PACKAGE_MANAGERS.search(step.command):
                    hint = (
                        "\n(the local backend runs on the host system with read-only system "
                        "directories: packages must already be installed on the host, or use "
                        "sandbox=docker / sandbox=kubernetes)"
                    )
                raise SandboxStartError(f"task {task.task_id}: build step {step.index} ({step.text}) {why}; output tail:\n{tail}{hint}")


async def _copy(sandbox: Any, task: Task, step: ResolvedStep) -> None:
    ctx = task.environment.build_context
    if ctx is None:
        raise TaskFormatError(task.path or task.task_id, f"build step {step.index} ({step.text}): COPY needs a build context")
    ctx = Path(ctx).resolve()
    pattern = str(ctx / step.src)
    matches = sorted(glob.glob(pattern)) if glob.has_magic(step.src) else ([pattern] if os.path.lexists(pattern) else [])
    if not matches:
        raise TaskFormatError(task.path or ctx, f"build step {step.index} ({step.text}): source {step.src!r} not found in {ctx}")
    into = step.into or len(matches) > 1
    if not into:
        st = await sandbox.call("stat", path=step.path)
        into = bool(st.get("is_dir"))
    for m in matches:
        src = Path(m).resolve()
        if src != ctx and ctx not in src.parents:
            raise TaskFormatError(task.path or ctx, f"build step {step.index} ({step.text}): source {step.src!r} leaves the build context")
        if src.is_dir():
            await sandbox.upload(src, step.path)
        else:
            dest = f"{step.path.rstrip('/')}/{src.name}" if into else step.path
            await sandbox.write_file(dest, src.read_bytes(), mode=src.stat().st_mode & 0o7777)


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
    staging_fs: Path, tops: list[str], workdir: str, network: str, hostname: str
) -> list[str]:
    python, python_binds = agent_python()
    argv = ["bwrap", "--tmpfs", "/"] + system_binds()
    argv += ["--dev", "/dev", "--proc", "/proc"]
    for top in tops:
        argv += ["--bind", str(staging_fs / top), f"/{top}"]
    argv += python_binds  # after /root: a pyenv prefix lives below it
    argv += ["--ro-bind", str(INSIDE_DIR), AGENT_MOUNT]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", hostname]
    if network == "no-network":
        argv += ["--unshare-net"]
    argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    for cap in KEEP_CAPS:
        argv += ["--cap-add", cap]
    argv += ["--remount-ro", "/", "--chdir", workdir, "--", python, "-I", "-S", f"{AGENT_MOUNT}/server.py"]
    return argv


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:60] or "task"


def _rmtree(path: Path) -> None:
    def retry(func: Any, p: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(p), 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=retry)


# --- resource limits -----------------------------------------------------------------------

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000


class CgroupUnavailable(Exception):
    """No writable cgroup hierarchy: the sandbox runs without limits (the reason says why)."""


def _own_cgroups() -> dict[str, str]:
    """controller (or "" for cgroup v2) -> this process's group path."""
    out: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        for c in ctrls.split(",") if ctrls else [""]:
            out[c] = path
    return out


class CgroupLimits:
    """Per-sandbox cgroups below this process's own: v1 controllers if mounted, else v2.

    The bwrap process joins them before it execs (a small ``sh`` wrapper writes its pid into
    every ``cgroup.procs``), so nothing in the sandbox ever runs outside them.
    """

    def __init__(self, dirs: list[Path], applied: list[str], cpu_usage: tuple[Path, str] | None, version: int) -> None:
        self.dirs = dirs
        self.applied = applied
        self.cpu_usage = cpu_usage
        self.version = version

    @classmethod
    def create(cls, name: str, res: Resources) -> "CgroupLimits":
        own = _own_cgroups()
        reasons: list[str] = []
        if (CGROUP_ROOT / "memory" / "cgroup.procs").exists() or (CGROUP_ROOT / "pids" / "cgroup.procs").exists():
            try:
                return cls._create_v1(name, res, own)
            except OSError as e:
                reasons.append(f"cgroup v1: {e}")
        unified = CGROUP_ROOT / "unified" if (CGROUP_ROOT / "unified" / "cgroup.procs").exists() else CGROUP_ROOT
        if (unified / "cgroup.controllers").exists() and "" in own:
            try:
                return cls._create_v2(name, res, unified / own[""].lstrip("/"))
            except OSError as e:
                reasons.append(f"cgroup v2: {e}")
        raise CgroupUnavailable("; ".join(reasons) or "no cgroup hierarchy mounted at /sys/fs/cgroup")

    @classmethod
    def _create_v1(cls, name: str, res: Resources, own: dict[str, str]) -> "CgroupLimits":
        dirs: list[Path] = []
        applied: list[str] = []
        cpu_usage = None
        seen: set[Path] = set()
        try:
            for ctrl in ("memory", "pids", "cpu", "cpuacct"):
                mount = CGROUP_ROOT / ctrl
                if ctrl not in own or not (mount / "cgroup.procs").exists():
                    continue
                d = mount / own[ctrl].lstrip("/") / f"farm-{name}"
                if d.resolve() in seen:  # cpu,cpuacct co-mounted
                    continue
                d.mkdir()
                seen.add(d.resolve())
                dirs.append(d)
                if ctrl == "memory" and res.memory_mb > 0:
                    (d / "memory.limit_in_bytes").write_text(str(res.memory_mb << 20))
                    applied.append(f"memory={res.memory_mb}MiB")
                if ctrl == "pids" and res.pids > 0:
                    (d / "pids.max").write_text(str(res.pids))
                    applied.append(f"pids={res.pids}")
                if (d / "cpu.cfs_quota_us").exists() and res.cpus > 0:
                    (d / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
                    (d / "cpu.cfs_quota_us").write_text(str(int(res.cpus * CPU_PERIOD_US)))
                    applied.append(f"cpus={res.cpus:g}")
                if (d / "cpuacct.usage").exists():
                    cpu_usage = (d / "cpuacct.usage", "ns")
            if not dirs:
                raise OSError("no memory/pids/cpu controller mounted")
        except OSError:
            cls(dirs, applied, None, 1).remove()
            raise
        return cls(dirs, applied, cpu_usage, 1)

    @classmethod
    def _create_v2(cls, name: str, res: Resources, parent: Path) -> "CgroupLimits":
        d = parent / f"farm-{name}"
        # enabling controllers for children can fail (no-internal-process rule): limits that
        # are then missing are reported, not fatal
        for ctrl in ("memory", "pids", "cpu"):
            try:
                (parent / "cgroup.subtree_control").write_text(f"+{ctrl}")
            except OSError:
                pass
        d.mkdir()
        applied: list[str] = []
        try:
            if (d / "memory.max").exists() and res.memory_mb > 0:
                (d / "memory.max").write_text(str(res.memory_mb << 20))
                applied.append(f"memory={res.memory_mb}MiB")
            if (d / "pids.max").exists() and res.pids > 0:
                (d / "pids.max").write_text(str(res.pids))
                applied.append(f"pids={res.pids}")
            if (d / "cpu.max").exists() and res.cpus > 0:
                (d / "cpu.max").write_text(f"{int(res.cpus * CPU_PERIOD_US)} {CPU_PERIOD_US}")
                applied.append(f"cpus={res.cpus:g}")
        except OSError:
            cls([d], applied, None, 2).remove()
            raise
        return cls([d], applied, (d / "cpu.stat", "usage_usec"), 2)

    def describe(self) -> str:
        return f"cgroup v{self.version}: " + (", ".join(self.applied) or "accounting only")

    def wrap(self, argv: list[str]) -> list[str]:
        joins = " && ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.dirs)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "farm-sandbox"] + argv

    def cpu_seconds(self) -> float | None:
        if self.cpu_usage is None:
            return None
        path, unit = self.cpu_usage
        try:
            text = path.read_text()
            if unit == "ns":
                return int(text.strip()) / 1e9
            for line in text.splitlines():
                k, _, v = line.partition(" ")
                if k == unit:
                    return int(v) / 1e6
        except (OSError, ValueError):
            pass
        return None

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            try:
                out.update(int(x) for x in (d / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return out

    def remove(self) -> None:
        """Kill whatever is still in the groups, then delete them."""
        deadline = time.monotonic() + 5.0
        while True:
            left = self.pids()
            if not left or time.monotonic() > deadline:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        for d in reversed(self.dirs):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY until the last task has fully exited
                    time.sleep(0.02)
            else:
                log.warning("could not remove cgroup %s", d)


# --- the sandbox ----------------------------------------------------------------------------


class LocalSandbox(ChannelSandboxMixin):
    """A bubblewrap sandbox driven through the sandbox-agent channel."""

    backend = "local"

    def __init__(
        self,
        task: Task,
        *,
        network: str | None = None,
        root_dir: Path | None = None,
        allow_any_image: bool = False,
        limits: bool = True,
    ) -> None:
        self.task = task
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
        self._workdir = task.environment.workdir or "/"
        self._env: dict[str, str] = {}
        self._started = False
        self._closed = False

    @property
    def pid(self) -> int | None:
        """Host pid of the bwrap process (its process group holds the sandbox)."""
        return self.proc.pid if self.proc else None

    @property
    def workdir(self) -> str:
        return self._workdir

    def base_env(self) -> dict[str, str]:
        return {"PATH": BASE_PATH, "HOME": "/root", "LANG": "C.UTF-8", **literal_task_env(self.task)}

    async def __aenter__(self) -> "LocalSandbox":
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
        check_image(self.task, self.allow_any_image)
        base_env = self.base_env()
        steps = resolve_build_steps(self.task, base_env)
        tops = writable_tops(self.task, steps)
        self._started = True
        try:
            await self._launch(base_env, steps, tops)
            await replay_build_steps(self, self.task, steps)
        except BaseException as e:
            await self.close()
            if isinstance(e, (SandboxError, TaskFormatError, UnsupportedTaskError)) or not isinstance(e, Exception):
                raise
            raise SandboxStartError(f"task {self.task.task_id}: local sandbox failed to start: {e!r}") from e
        for s in steps:
            if s.kind == "workdir":
                self._workdir = s.path
        self._env = {**(steps[-1].env if steps else {}), **env_overrides(self.task)}
        self.stats.start_s = time.monotonic() - t0
        self.stats.requests = self.channel.requests if self.channel else 0

    async def _launch(self, base_env: dict[str, str], steps: list[ResolvedStep], tops: list[str]) -> None:
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
        argv = bwrap_argv(fs, tops, first_workdir, self.network, "sandbox")
        if self.limits:
            try:
                self._cgroups = CgroupLimits.create(self.staging.name, self.task.environment.resources)
                self.stats.extra["limits"] = self._cgroups.describe()
                (self.staging / CGROUPS_FILE).write_text("".join(f"{d}\n" for d in self._cgroups.dirs))
                argv = self._cgroups.wrap(argv)
            except CgroupUnavailable as e:
                self.stats.extra["limits"] = f"unavailable: {e}"
        else:
            self.stats.extra["limits"] = "disabled"
        self._stderr_path = self.staging / "agent.stderr"
        with open(self._stderr_path, "wb") as err:
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                env=base_env,
                start_new_session=True,
                limit=LINE_LIMIT,
            )
        (self.staging / OWNER_FILE).write_text(f"{self.proc.pid} {_start_time(self.proc.pid)}\n")
        self.channel = Channel(self.proc.stdout, self.proc.stdin, name=f"sandbox {self.task.task_id}", describe_loss=self._describe_loss)  # type: ignore[arg-type]
        self.channel.start()
        try:
            await self.channel.request("ping", timeout=PING_TIMEOUT_S)
        except SandboxError as e:
            raise SandboxStartError(f"task {self.task.task_id}: the sandbox agent did not come up: {e}") from None

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
                except asyncio.TimeoutError:
                    pass
            if self.proc.returncode is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                await self.proc.wait()
        if self._cgroups is not None:
            self.stats.cpu_s = self._cgroups.cpu_seconds()
            await asyncio.to_thread(self._cgroups.remove)
        if self.staging is not None:
            await asyncio.to_thread(_rmtree, self.staging)

    # --- operations -------------------------------------------------------------------------

    def _ch(self) -> Channel:
        if self._closed:
            raise SandboxClosedError(f"sandbox for task {self.task.task_id} is closed")
        if self.channel is None:
            raise SandboxError(f"sandbox for task {self.task.task_id} was not started")
        return self.channel


# --- garbage collection ---------------------------------------------------------------------


def _start_time(pid: int) -> str | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return data[data.rindex(")") + 2 :].split()[19]


def gc_local(root_dir: Path | None = None, min_age_s: float = 60.0) -> list[str]:
    """Remove what crashed drivers left behind: staging dirs whose bwrap is gone, with the
    cgroups recorded in them. Returns the paths removed."""
    root = Path(root_dir) if root_dir else Path(tempfile.gettempdir()) / "farm-sandboxes"
    removed: list[str] = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if not d.is_dir():
            continue
        try:
            pid_s, start = (d / OWNER_FILE).read_text().split()
            alive = _start_time(int(pid_s)) == start
        except (OSError, ValueError):
            # no owner yet: a sandbox that is starting right now, unless it is old
            alive = time.time() - d.stat().st_mtime < min_age_s
        if alive:
            continue
        try:
            dirs = [Path(x) for x in (d / CGROUPS_FILE).read_text().split("\n") if x]
        except OSError:
            dirs = []
        if dirs:
            CgroupLimits(dirs, [], None, 0).remove()
            removed += [str(x) for x in dirs]
        _rmtree(d)
        removed.append(str(d))
    return removed
