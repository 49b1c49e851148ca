"""The one way farm runs a ``docker``/``podman`` command, and the labels farm puts on images.

:func:`run_engine` returns what the command said (for callers that read a failure as an
answer: "not present", "pull failed"); :func:`engine` raises :class:`SandboxStartError` on a
failure (for the container backend's create/exec/remove calls). Both run the command the same
way and kill it on a timeout or a cancellation.
"""

from __future__ import annotations

import asyncio

from farm.sandbox.base import SandboxStartError

STANDIN_LABEL = "io.farm.standin"  # set on `make images` stand-in bases; inherited by builds
TASK_LABEL = "io.farm.task"
DIGEST_LABEL = "io.farm.build-digest"  # the full sha256 of build_digest


async def _exec(binary: str, *args: str, timeout: float) -> tuple[int, bytes, bytes]:
    """(exit status, stdout, stderr) of one engine command.

    Raises:
        TimeoutError: after ``timeout`` seconds (the command is killed first).
    """
    proc = await asyncio.create_subprocess_exec(binary, *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except (TimeoutError, asyncio.CancelledError):
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out, err


def _timed_out(binary: str, args: tuple[str, ...], timeout: float) -> str:
    return f"{binary} {args[0]} timed out after {timeout:.0f} s"


async def run_engine(binary: str, *args: str, timeout: float = 600) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of one engine command; 124 on a timeout."""
    try:
        rc, out, err = await _exec(binary, *args, timeout=timeout)
    except TimeoutError:
        return 124, "", _timed_out(binary, args, timeout)
    return rc, out.decode(errors="replace"), err.decode(errors="replace")


async def engine(binary: str, *args: str, check: bool = True, timeout: float = 600) -> str:
    """Run one container-engine command; its stdout.

    Raises:
        SandboxStartError: (``reason="engine"``) the command failed or timed out;
            (``reason="image_pull"``) a ``run`` failed because its image could not be pulled.
    """
    try:
        rc, out, err = await _exec(binary, *args, timeout=timeout)
    except TimeoutError:
        raise SandboxStartError(_timed_out(binary, args, timeout), reason="engine") from None
    if check and rc != 0:
        text = err.decode(errors="replace").strip() or out.decode(errors="replace").strip() or "(no output)"
        reason = "image_pull" if args and args[0] == "run" and _pull_failed(text) else "engine"
        raise SandboxStartError(f"{binary} {' '.join(args[:2])} failed ({rc}): {text[-1500:]}", reason=reason)
    return out.decode(errors="replace")


async def remove_container(binary: str, name: str, *, tries: int = 5) -> str | None:
    """Remove a container, running or not; None once it is gone, else the engine's last error.

    ``rm -f`` is not enough alone: when the container's main process exits while podman is
    killing it (a sandbox whose agent was just told to shut down), podman answers "container
    state improper: stopped" and leaves the container behind. The next ``rm`` finds it stopped
    and removes it, so a failure is tried again while the container still exists.
    """
    err = ""
    for attempt in range(tries):
        rc, _, err = await run_engine(binary, "rm", "-f", "-t", "0", name, timeout=120)
        if rc == 0:
            return None
        rc, _, why = await run_engine(binary, "inspect", "--type", "container", "--format", "{{.Id}}", name,
                                      timeout=60)
        if rc != 0 and "no such" in why.lower():  # gone (removed by the failed call or by someone else)
            return None
        await asyncio.sleep(0.1 * (attempt + 1))
    return err.strip() or f"{binary} rm exited non-zero"


def _pull_failed(stderr: str) -> bool:
    low = stderr.lower()
    return any(s in low for s in ("pull access denied", "manifest unknown", "image not known",
                                  "unable to find image", "error pulling image", "failed to resolve reference",
                                  "initializing source", "no such image"))


_kinds: dict[str, str] = {}


async def engine_kind(binary: str) -> str:
    """``podman`` or ``docker`` (what ``<binary> --version`` says; asked once per binary)."""
    if binary not in _kinds:
        _, out, _ = await run_engine(binary, "--version", timeout=30)
        _kinds[binary] = "podman" if "podman" in out.lower() else "docker"
    return _kinds[binary]


def pull_flag(kind: str, pull: str) -> str:
    """The build's base-image pull policy: podman takes ``never``/``missing``; docker's
    ``--pull`` is a boolean (false = use a present base, pull a missing one)."""
    if kind == "podman":
        return f"--pull={'never' if pull == 'never' else 'missing'}"
    return "--pull=false"
