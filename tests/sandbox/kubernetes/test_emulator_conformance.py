"""The sandbox conformance suite on the Kubernetes backend through the API-server emulator.

Backend id ``k8s-emulator``: the same suite as tests/sandbox/kubernetes/test_kubernetes_backend.py (which runs
it through in-process fakes), but the backend loads its clients from a kubeconfig and the real
``kubernetes`` client speaks HTTP and the ``pods/exec`` WebSocket to tests/sandbox/kubernetes/apiserver.
The backend is tests/support/kubernetes.py's ``EmulatorBackend``; the ``emulated`` fixture is this
folder's conftest.py.
"""

from __future__ import annotations

import pytest

from tests.support.kubernetes import EmulatorBackend

from .conformance import KubernetesConformance

pytestmark = [pytest.mark.bwrap, pytest.mark.root, pytest.mark.tools("nsenter")]


class TestEmulatorConformance(KubernetesConformance):
    """Every conformance test, and the Kubernetes-specific ones of the fake suite, over HTTP."""

    @pytest.fixture
    def backend(self, emulated: EmulatorBackend):
        return emulated
