"""``sandbox.backend=none``: NO isolation and no processes, for benchmarking the orchestrator only.

The null backend of issue 16, named ``none`` because the config language reads ``null`` as
a missing value (``sandbox.backend=null`` is ``None``, not a name).

bench/fanout.py measures what the driver, the Ray workers and the store cost per trial in
flight. A real sandbox (bubblewrap, a pod) would dominate that measurement, so this backend
starts nothing: its files live in a dict in the worker's memory, a command runs no process and
answers exit 0 with no output, and the verifier is a constant (``sandbox.none.reward``, written
where tests/test.sh would write it). Its rows say ``sandbox_backend=none``; nothing in them is a
result about any agent or task.

It is refused unless the environment variable ``FARM_BENCH_NULL_SANDBOX=1`` is set (only
bench/fanout.py and the tests set it): a variable, not a config key, so that no config file
copied from a benchmark can run an evaluation without isolation. The check runs in the
driver's preflight (``check_environment``: ``farm run`` stops with a ConfigError before
anything runs) and again for every sandbox opened, in whichever process opens it.
"""

from __future__ import annotations

import os
import posixpath
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from farm.config import SandboxConfig
from farm.errors import ConfigError
from farm.sandbox.base import (
    Capabilities,
    ExecResult,
    GcReport,
    SandboxClosedError,
    SandboxError,
    SandboxStartError,
    SandboxStats,
    StatResult,
    ToolRequest,
    ToolResponse,
)
from farm.tasks.model import Task

GUARD_ENV = "FARM_BENCH_NULL_SANDBOX"
# a directory: each file in it fails one start (bench/chaos.py's burst of failed starts)
FAIL_STARTS_ENV = "FARM_BENCH_NULL_FAIL_STARTS"
ISOLATION = "none: sandbox.backend=none (benchmark-only backend, no isolation)"
# what the verifier's command is recognised by, and where its constant reward goes
VERIFIER_COMMAND = "/tests/test.sh"
REWARD_PATH = "/logs/verifier/reward.txt"
# farm's count of the agent's leftover processes (farm/run/trial.py) ends by echoing the count:
# there are none here
PROCESS_COUNT_MARK = "/proc/[0-9]*"


def require_bench() -> None:
    """Raises ConfigError unless a benchmark asked for the null backend explicitly."""
    if os.environ.get(GUARD_ENV) != "1":
        raise ConfigError(
            f"sandbox.backend='none' runs agent commands nowhere and isolates nothing: it is only for "
            f"benchmarking the orchestrator (bench/fanout.py --sandbox none), which sets {GUARD_ENV}=1; "
            f"{GUARD_ENV}={os.environ.get(GUARD_ENV)!r} here. Choose sandbox.backend=local, docker or kubernetes."
        )


class NullSandbox:
    """A sandbox that runs nothing (see the module docstring); one per trial role."""

    capabilities = Capabilities(set_network=True, isolated_commands=False)

    def __init__(self, task: Task, reward: float) -> None:
        self.workdir = task.workdir
        self.reward = reward
        self.stats = SandboxStats(isolation=ISOLATION)
        self.files: dict[str, bytes] = {}
        self._started = False
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise SandboxClosedError("none sandbox is closed")
        if not self._started:
            raise SandboxError("none sandbox is not started")

    def _abs(self, path: str, cwd: str | None = None) -> str:
        return posixpath.normpath(posixpath.join(cwd or self.workdir, path))

    async def start(self) -> None:
        """Raises:
        SandboxStartError: a start that took a token from the directory named by
            FARM_BENCH_NULL_FAIL_STARTS (bench/chaos.py's burst of failed starts: one token per
            start to fail; only this backend reads it).
        """
        t0 = time.monotonic()
        tokens = os.environ.get(FAIL_STARTS_ENV)
        if tokens and os.path.isdir(tokens):
            # a removal succeeds in exactly one process: each token fails exactly one start
            for name in sorted(os.listdir(tokens)):
                try:
                    os.remove(os.path.join(tokens, name))
                except FileNotFoundError:
                    continue  # another start took it
                raise SandboxStartError(f"none sandbox: start refused (chaos token {name})")
        self._started = True
        self.stats.start_s = time.monotonic() - t0

    async def exec(self, command: str, timeout_s: float = 120.0, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, merge_stderr: bool = False,
                   output_cap: int | None = None) -> ExecResult:
        self._check()
        self.stats.requests += 1
        out = ""
        if VERIFIER_COMMAND in command:
            self.files[REWARD_PATH] = f"{self.reward:g}\n".encode()
            out = f"none sandbox: tests/test.sh not run; constant reward {self.reward:g}\n"
        elif PROCESS_COUNT_MARK in command:
            out = "0\n"
        return ExecResult(0, stdout=out, output_bytes=len(out))

    async def read_file(self, path: str) -> bytes:
        self._check()
        p = self._abs(path)
        if p not in self.files:
            raise FileNotFoundError(p)
        return self.files[p]

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._check()
        self.files[self._abs(path)] = bytes(data)

    async def upload(self, local_dir: Path, dest: str) -> None:
        self._check()
        if not Path(local_dir).is_dir():
            raise NotADirectoryError(str(local_dir))
        # names only: the benchmark's tests/ and solution/ are not read into memory per trial
        for f in Path(local_dir).rglob("*"):
            if f.is_file():
                self.files[self._abs(str(f.relative_to(local_dir)), dest)] = b""

    async def stat(self, path: str) -> StatResult:
        self._check()
        p = self._abs(path)
        if p in self.files:
            return StatResult(True, False, len(self.files[p]))
        prefix = p.rstrip("/") + "/"
        return StatResult(any(k.startswith(prefix) for k in self.files), True)

    async def tool(self, request: ToolRequest) -> ToolResponse:
        self._check()
        self.stats.requests += 1
        path = request.args.get("file_path") or request.args.get("path")
        if request.name == "Write" and isinstance(path, str):
            content = request.args.get("content")
            self.files[self._abs(path, request.workdir)] = str(content or "").encode()
            return ToolResponse(f"Wrote {path}", duration_s=0.0)
        if request.name == "Read" and isinstance(path, str):
            data = self.files.get(self._abs(path, request.workdir))
            if data is None:
                return ToolResponse(f"File does not exist: {path}", error="FileNotFoundError", duration_s=0.0)
            return ToolResponse(data.decode(errors="replace"), duration_s=0.0)
        # Bash, Edit, Glob: nothing runs
        return ToolResponse("", command_s=0.0 if request.name == "Bash" else None, duration_s=0.0)

    async def set_network(self, network: str) -> None:
        self._check()

    async def kill_leftovers(self) -> int:
        self._check()
        return 0

    async def close(self) -> None:
        self._closed = True


class NullBackend:
    """``sandbox.backend=none`` for the registry (farm/sandbox/registry.py)."""

    name = "none"

    def open(self, task: Task, cfg: SandboxConfig, *, network: str | None, run_id: str, trial_key: str,
             attempt: int, role: str) -> NullSandbox:
        require_bench()
        return NullSandbox(task, cfg.none.reward)

    def check_task(self, task: Task, cfg: SandboxConfig) -> None:
        return None  # any task: nothing of it is run (check_environment guards the backend itself)

    def check_environment(self, cfg: SandboxConfig) -> None:
        require_bench()

    def gc(self, cfg: SandboxConfig, is_run_alive: Callable[[str], bool], *, dry_run: bool = False) -> GcReport:
        return GcReport()  # nothing outlives a none sandbox


BACKEND = NullBackend()
