"""User-mode networking for a local sandbox's private network namespace (slirp4netns).

A "public" local sandbox with ``sandbox.local.public_network=isolated`` gets its own network
namespace (bwrap ``--unshare-net``) so that the host's loopback — the Ray head, policy
endpoints, anything on 127.0.0.1 — stays out of reach; slirp4netns then gives that namespace
a tap device with a NAT'd route to the internet and a DNS forwarder.

Ordering is the whole difficulty. bwrap reports the sandbox's pid on ``--info-fd`` as soon
as it has cloned the child, and the child's first act in its new network namespace is to add
127.0.0.1 to loopback and bring it up over netlink. slirp4netns ``--configure`` brings the
same loopback up too, and the kernel then adds 127.0.0.1 by itself; started on the pid
alone, slirp4netns sometimes gets there first, bwrap's own add fails and bwrap dies with
``loopback: Failed RTM_NEWADDR: No child processes`` (the errno in that message is stale).
That failed up to 3.5 % of starts one at a time and 5-10 % four at a time on a 2-core VM at
load 3-10 (docs/performance.md), and 23 in 40 in the probe that found it. bwrap has no
option that signals "namespace setup done" (``--block-fd`` parks the child after loopback
setup without saying when it got there; ``--userns-block-fd`` needs a user namespace the
sandbox does not otherwise want), so the caller starts slirp4netns only after the sandbox
agent has answered its first request: the agent is the program bwrap exec'd, so all of
bwrap's namespace setup is over by then. Nothing in a sandbox's start needs the network
before that point (Dockerfile RUN steps are replayed through the agent, after it answered).
The cost is slirp4netns's own start, now in series with the agent's rather than beside it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

from farm.sandbox.base import SandboxStartError

SLIRP_DNS = "10.0.2.3"  # slirp4netns's built-in DNS forwarder
READY_TIMEOUT_S = 30.0
LOG_NAME = "slirp4netns.log"
RESOLV_NAME = "resolv.conf"


class SlirpNetwork:
    """slirp4netns for one sandbox: the fds and files bwrap needs, then the process.

    Use: construct before launching bwrap; pass ``info_fd`` and ``resolv_conf`` to bwrap and
    ``info_fd`` in its ``pass_fds``; call ``spawned()`` right after bwrap started; call
    ``start()`` once the sandbox agent has answered (see the module docstring for why not
    earlier); ``close()`` always.
    """

    def __init__(self, staging: Path, label: str, *, binary: str | None = None) -> None:
        """``staging``: the sandbox's host staging dir (resolv.conf and the log go there);
        ``label``: names the sandbox in errors.

        Raises:
            SandboxStartError: slirp4netns is not installed.
        """
        found = binary or shutil.which("slirp4netns")
        if found is None:
            raise SandboxStartError(
                f"{label}: network 'public' with sandbox.local.public_network=isolated needs "
                "slirp4netns (apt-get install slirp4netns), or set sandbox.local.public_network=host",
                reason="network",
            )
        self.binary = found
        self.label = label
        self.staging = staging
        self.log_path = staging / LOG_NAME
        self.resolv_conf = staging / RESOLV_NAME
        self.resolv_conf.write_text(f"nameserver {SLIRP_DNS}\n")
        self.proc: asyncio.subprocess.Process | None = None
        # bwrap writes {"child-pid": N, ...} here and closes it; we read it in start()
        self._info_r, self.info_fd = os.pipe()
        self._info_w_open = True
        # slirp4netns exits when this closes: with bwrap's --die-with-parent, a driver killed
        # with SIGKILL leaves no sandbox process behind, and none of slirp4netns either
        self._exit_w = -1

    def spawned(self) -> None:
        """bwrap has its copy of the info fd: drop ours, so a bwrap that dies reads as EOF."""
        if self._info_w_open:
            os.close(self.info_fd)
            self._info_w_open = False

    async def start(self) -> None:
        """Attach slirp4netns to the sandbox's namespace and wait until it has configured it.

        Call only after bwrap has exec'd the sandbox's program (module docstring).

        Raises:
            SandboxStartError: bwrap reported no child pid, or slirp4netns failed or timed out.
        """
        self.spawned()
        try:
            pid = await asyncio.wait_for(asyncio.to_thread(self._read_child_pid), READY_TIMEOUT_S)
        except (TimeoutError, ValueError, KeyError) as e:
            raise SandboxStartError(
                f"{self.label}: bwrap did not report its child pid: {e!r}", reason="network"
            ) from None
        finally:
            self._close_info()
        ready_r, ready_w = os.pipe()
        exit_r, self._exit_w = os.pipe()
        try:
            with open(self.log_path, "wb") as slirp_log:
                # --disable-host-loopback: 10.0.2.2 would otherwise reach the host's 127.0.0.1
                self.proc = await asyncio.create_subprocess_exec(
                    self.binary, "--configure", "--mtu=65520", "--disable-host-loopback",
                    f"--ready-fd={ready_w}", f"--exit-fd={exit_r}", str(pid), "tap0",
                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=slirp_log,
                    pass_fds=(ready_w, exit_r), start_new_session=True,
                )
            os.close(ready_w)
            ready_w = -1
            got = await asyncio.wait_for(asyncio.to_thread(os.read, ready_r, 1), READY_TIMEOUT_S)
        except (TimeoutError, OSError) as e:
            raise SandboxStartError(
                f"{self.label}: slirp4netns did not configure the network: {e!r}", reason="network"
            ) from None
        finally:
            if ready_w >= 0:
                os.close(ready_w)
            os.close(ready_r)
            os.close(exit_r)
        if got != b"1":
            tail = self.log_path.read_text(errors="replace")[-500:]
            raise SandboxStartError(f"{self.label}: slirp4netns failed: {tail}", reason="network")

    def describe(self) -> str:
        return "public (slirp4netns, host loopback unreachable)"

    def _read_child_pid(self) -> int:
        data = b""
        while b"}" not in data:
            chunk = os.read(self._info_r, 4096)
            if not chunk:
                break
            data += chunk
        return int(json.loads(data.decode())["child-pid"])

    def _close_info(self) -> None:
        if self._info_r >= 0:
            os.close(self._info_r)
            self._info_r = -1

    async def close(self) -> None:
        """Stop slirp4netns (it also exits once the namespace is gone) and free the fds."""
        self.spawned()
        self._close_info()
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if self._exit_w >= 0:
            os.close(self._exit_w)
            self._exit_w = -1
