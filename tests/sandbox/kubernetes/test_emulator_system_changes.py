"""A pod's system-tamper check against the API-server emulator: what an agent changed on the
verifier's path after the start is found by inode change time (relayed/ctime_scan.py) and flags
the trial; what the start itself did is not the agent's. The emulator's pods run from the host's
read-only /usr, so the writable system path here is the pod's root: a conftest.py at "/" is an
ancestor of /tests, which pytest loads."""

from __future__ import annotations

import pytest

from farm.grade.tamper import SYSTEM_TAMPER, verifier_tamper
from farm.sandbox.kubernetes.sandbox import KubernetesSandbox
from tests.support.kubernetes import EmulatorBackend, image_task

pytestmark = [pytest.mark.bwrap, pytest.mark.root, pytest.mark.tools("nsenter")]


async def test_a_conftest_planted_at_the_pod_root_is_a_system_tamper(cluster: EmulatorBackend) -> None:
    sb = cluster.make(image_task(network="no-network"), "no-network")
    assert isinstance(sb, KubernetesSandbox) and sb.capabilities.system_diff
    await sb.start()
    try:
        # the start's own work (log dirs, the workdir) is before the baseline: nothing to flag yet
        assert await sb.system_changes() == []
        assert await verifier_tamper(sb) == ([], "")
        res = await sb.exec("printf 'import pytest\\n' > /conftest.py && echo ok > /tmp/scratch")
        assert res.exit_code == 0, res.output
        assert ("C", "/conftest.py") in await sb.system_changes()
        flags, note = await verifier_tamper(sb)
        assert flags == [SYSTEM_TAMPER] and "/conftest.py" in note, (flags, note)
    finally:
        await sb.close()


async def test_a_pod_whose_start_time_was_not_recorded_says_so(cluster: EmulatorBackend) -> None:
    sb = cluster.make(image_task(network="no-network"), "no-network")
    await sb.start()
    try:
        sb._system_baseline = None  # as when the baseline command failed at the start
        flags, note = await verifier_tamper(sb)
        assert flags == [] and note.startswith("system paths not checked:"), note
    finally:
        await sb.close()
