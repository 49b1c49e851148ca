"""What is shipped into a sandbox, pinned by name: the relay-backed backends unpack this archive
in the pod's init container (farm/sandbox/relayed/manifests.py pack_inside) and start
``relay.py`` and ``server.py`` from it by path, so a file that went missing in a re-layout would
fail only inside a pod. The names were read at c648c62, before issue 25 moved relay.py into
farm/sandbox/inside/; capture.py and contain.py came with issue 40 (procs.py imports both),
spawn.py with issue 41 (jail.py imports it)."""

from __future__ import annotations

import base64
import io
import tarfile

from farm.sandbox.relayed import manifests as m
from farm.sandbox.relayed.sandbox import INSIDE_SRC

SHIPPED = ["capture.py", "contain.py", "jail.py", "leaf_bash.py", "leaf_tools.py", "leaf_vendor.py", "procs.py",
           "proctable.py", "relay.py", "server.py", "spawn.py", "verifier_ns.py"]


def test_the_shipped_archive_holds_the_same_files() -> None:
    archive = tarfile.open(fileobj=io.BytesIO(base64.b64decode(m.pack_inside(INSIDE_SRC))))
    assert sorted(archive.getnames()) == SHIPPED


def test_the_paths_the_pod_starts_are_in_the_archive() -> None:
    for started in (m.RELAY, m.SERVER):
        assert started.startswith(m.INSIDE_DIR + "/")
        assert started.rpartition("/")[2] in SHIPPED
