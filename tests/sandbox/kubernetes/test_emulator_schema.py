"""What the backend sends is checked at the point of sending: the emulator's 422 fails the start.

The first mutants are the ones that passed every Kubernetes test while the backend was tested
only through in-process fakes (issue 15): a string ``runAsUser``, a string
``terminationGracePeriodSeconds``, an unknown field. Through the real client they no longer
reach the wire: kubernetes 37's models refuse them. What the models allow and an API server
refuses (label syntax, names) reaches the emulator and its 422 fails the start.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from farm.sandbox.base import SandboxStartError
from farm.sandbox.kubernetes.sandbox import load_clients
from farm.sandbox.relayed import manifests as m
from tests.support.kubernetes import EmulatorBackend, image_task

pytestmark = [pytest.mark.bwrap, pytest.mark.root, pytest.mark.tools("nsenter")]


def _task_sc(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"]["containers"][0]["securityContext"]


# kubernetes 37's generated client checks a body's types against its pydantic models before
# sending: these never reach the wire, and the start fails naming the field
@pytest.mark.parametrize("mutate,field", [
    pytest.param(lambda pod: _task_sc(pod).update(runAsUser="0"), "spec.containers.0.securityContext.runAsUser",
                 id="runAsUser-string"),
    pytest.param(lambda pod: pod["spec"].update(terminationGracePeriodSeconds="5"),
                 "spec.terminationGracePeriodSeconds", id="grace-string"),
    pytest.param(lambda pod: pod["spec"]["containers"][0].update(ports=[{"port": 80}]), "spec.containers.0.ports.0",
                 id="unknown-field"),
])
async def test_a_mistyped_pod_is_refused_before_it_is_sent(cluster: EmulatorBackend, monkeypatch, mutate,
                                                           field: str) -> None:
    _mutate_pods(monkeypatch, mutate)
    sb = cluster.make(image_task(network="no-network"), "no-network")
    with pytest.raises(SandboxStartError, match=re.escape(field)):
        await sb.start()
    assert cluster.emu.log.count(0, verb="create", resource="pods") == 0
    assert cluster.emu.objects("pods") == [] and cluster.emu.objects("networkpolicies") == []


# what the client's models allow but an API server refuses: the emulator's 422 fails the start
@pytest.mark.parametrize("mutate,field", [
    pytest.param(lambda pod: pod["metadata"]["labels"].update({m.RUN_LABEL: "run id with spaces"}), "metadata.labels",
                 id="label-value"),
    pytest.param(lambda pod: pod["metadata"]["labels"].update({"farm.dev/bad key": "x"}), "metadata.labels",
                 id="label-key"),
    pytest.param(lambda pod: pod["metadata"].update(name=pod["metadata"]["name"].upper()), "metadata.name",
                 id="name-uppercase"),
])
async def test_a_pod_the_api_server_refuses_fails_the_start_with_its_422(cluster: EmulatorBackend, monkeypatch,
                                                                         mutate, field: str) -> None:
    _mutate_pods(monkeypatch, mutate)
    sb = cluster.make(image_task(network="no-network"), "no-network")
    with pytest.raises(SandboxStartError) as e:
        await sb.start()
    assert "422" in str(e.value) and f"{field}: Invalid value" in str(e.value), str(e.value)
    # refused at the first object that carries the mutation (labels are on the policy too)
    creates = [(r.resource, r.status) for r in cluster.emu.log.records if r.verb == "create"]
    assert creates[-1][1] == 422 and all(status == 201 for _, status in creates[:-1]), creates
    # nothing stored, nothing run, and a policy created ahead of the pod is gone again
    assert cluster.emu.objects("pods") == [] and cluster.emu.kubelet.pods == {}
    assert cluster.emu.objects("networkpolicies") == []


def _mutate_pods(monkeypatch, mutate) -> None:
    real = m.pod_manifest

    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        pod = real(*args, **kwargs)
        mutate(pod)
        return pod

    monkeypatch.setattr(m, "pod_manifest", broken)


async def test_a_mistyped_network_policy_stops_the_start_before_any_pod(cluster: EmulatorBackend,
                                                                        monkeypatch) -> None:
    real = m.network_policies

    def broken(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        policies = real(*args, **kwargs)
        for p in policies:
            p["spec"]["policyTypes"] = "Egress"
        return policies

    monkeypatch.setattr(m, "network_policies", broken)
    sb = cluster.make(image_task(network="no-network"), "no-network")
    with pytest.raises(SandboxStartError, match=r"spec\.policyTypes"):
        await sb.start()
    assert cluster.emu.log.count(0, verb="create") == 0


def _post(cluster: EmulatorBackend, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A POST that no client model checks first (kubectl, another client version, a typo in YAML)."""
    req = urllib.request.Request(cluster.emu.url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {cluster.emu.token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_422_body_is_the_api_servers_status(cluster: EmulatorBackend) -> None:
    ns = cluster.cfg.namespace
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad"},
           "spec": {"initContainers": [{"name": "init", "image": "i", "command": ["python3", "-c", "pass"]}],
                    "containers": [{"name": "c", "image": "i", "command": ["sleep", "60"],
                                    "securityContext": {"runAsUser": "0"}}]}}
    code, body = _post(cluster, f"/api/v1/namespaces/{ns}/pods", pod)
    assert code == 422
    assert (body["kind"], body["status"], body["reason"], body["code"]) == ("Status", "Failure", "Invalid", 422)
    assert body["message"].startswith('Pod "bad" is invalid: spec.containers[0].securityContext.runAsUser: ')
    assert body["details"]["causes"][0]["field"] == "spec.containers[0].securityContext.runAsUser"
    assert cluster.emu.objects("pods") == []
    # the same object with an integer is stored, and through the real client too
    pod["spec"]["containers"][0]["securityContext"]["runAsUser"] = 0
    code, body = _post(cluster, f"/api/v1/namespaces/{ns}/pods", pod)
    assert code == 201 and body["metadata"]["uid"]
    core, _ = load_clients(cluster.cfg)
    pod["metadata"] = {"name": "bad-labels", "labels": {"farm.dev/run-id": "not a label value"}}
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod(ns, pod)
    assert e.value.status == 422 and json.loads(e.value.body)["details"]["causes"][0]["field"] == "metadata.labels"
    core.delete_namespaced_pod("bad", ns, grace_period_seconds=0)
