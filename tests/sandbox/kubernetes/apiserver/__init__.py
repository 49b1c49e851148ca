"""A Kubernetes API-server emulator for tests: real HTTP, the real client, pods in real sandboxes.

See README.md in this directory for how to start it and its knobs.
"""

from .execws import ExecKnobs
from .faults import Fault, RequestRecord
from .kubelet import KubeletKnobs
from .server import ApiServerEmulator

__all__ = ["ApiServerEmulator", "ExecKnobs", "Fault", "KubeletKnobs", "RequestRecord"]
