"""Every object farm generates validates against the official Kubernetes schema (offline)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from farm.config import KubernetesSandboxConfig
from farm.errors import ConfigError
from farm.sandbox.relayed import manifests as m
from farm.sandbox.relayed.sandbox import INSIDE_SRC
from farm.tasks.benchmark import load_pinned_source
from tests.shared import shared_path

from .fake_cluster import validate_object

INFRA = Path(__file__).resolve().parents[3] / "infra" / "k8s"


def validate(obj: dict) -> None:
    validate_object(obj)


@pytest.fixture(scope="module")
def tasks(request) -> list:
    fixtures = shared_path("fixtures", "harbor")
    out = []
    for bench, sub in (("swebench_verified", "swebench-verified"), ("swebench_pro", "swebench-pro"),
                       ("terminal_bench_2_verified", "terminal-bench-2")):
        out += load_pinned_source(bench, root=fixtures / sub)
    out += load_pinned_source("patch_eval_verified",
                          root=fixtures.parent / "grading" / "patcheval_verified_rows.jsonl")
    return out


CONFIGS = {
    "default": KubernetesSandboxConfig(),
    "hardened": KubernetesSandboxConfig(
        runtime_class="gvisor", node_selector={"farm.dev/pool": "sandbox"},
        tolerations=[{"key": "farm.dev/sandbox", "operator": "Exists", "effect": "NoSchedule"}],
        service_account="farm-sandbox", pull_secrets=["mirror-creds"], labels={"team": "eval"},
        capabilities="none", cpu_limit_factor=None, memory_limit="16Gi", priority_class="farm-low",
        pod_lifetime_s=7200,
    ),
}


@pytest.mark.parametrize("cfg_name", sorted(CONFIGS))
def test_every_generated_pod_and_policy_validates(tasks, cfg_name: str) -> None:
    cfg = CONFIGS[cfg_name]
    inside = m.pack_inside(INSIDE_SRC)
    assert len(tasks) == 2 + 1 + 3 + 3
    for task in tasks:
        name = m.pod_name(task.metadata["pod_prefix"], task.task_id, "f" * 64, 1)
        for network in ("public", "no-network"):
            pod = m.pod_manifest(task, cfg, name=name, run_id="2026-11-30 run/1", trial_key="f" * 64,
                                 image=task.environment.image, inside_b64=inside, network=network)
            validate(pod)
            for policy in m.network_policies(pod, network):
                validate(policy)


def test_pod_spec_is_hardened_and_sized_from_the_task(tasks) -> None:
    task = next(t for t in tasks if t.task_id == "django__django-14404")
    pod = m.pod_manifest(task, CONFIGS["default"], name="p", run_id="r", trial_key="k",
                         image=task.environment.image, inside_b64="", network="public")
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["shareProcessNamespace"] is False  # the relay is PID 1: no agent command can kill it
    # 3000 s agent + 3000 s verifier + 1800 s build + 600 s slack
    assert spec["activeDeadlineSeconds"] == 8400 and spec["restartPolicy"] == "Never"
    (c,) = spec["containers"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert "NET_RAW" not in c["securityContext"]["capabilities"]["add"]
    assert c["resources"]["requests"] == {"cpu": "1000m", "memory": "4096Mi", "ephemeral-storage": "10240Mi"}
    assert c["resources"]["limits"] == {"cpu": "1000m", "memory": "4096Mi", "ephemeral-storage": "10240Mi"}
    assert c["image"].startswith("swebench/sweb.eval.x86_64.django_1776_django-14404@sha256:")
    assert pod["metadata"]["annotations"][m.WORKDIR_ANNOTATION] == "/testbed"
    assert c["command"][:3] == [m.PYTHON, m.RELAY, "serve"]
    assert {"mountPath": "/.farm", "name": "farm", "readOnly": True} in c["volumeMounts"]
    init = spec["initContainers"][0]
    assert init["securityContext"]["runAsNonRoot"] is True and init["securityContext"]["readOnlyRootFilesystem"]
    labels = pod["metadata"]["labels"]
    assert labels[m.RUN_LABEL] == "r" and labels[m.TRIAL_LABEL] == "k" and labels[m.NETWORK_LABEL] == "public"
    hardened = m.pod_manifest(task, CONFIGS["hardened"], name="p", run_id="r", trial_key="k",
                              image="x", inside_b64="", network="no-network")["spec"]
    assert hardened["runtimeClassName"] == "gvisor" and hardened["tolerations"][0]["key"] == "farm.dev/sandbox"
    assert hardened["nodeSelector"] == {"farm.dev/pool": "sandbox"} and hardened["activeDeadlineSeconds"] == 7200
    assert "cpu" not in hardened["containers"][0]["resources"]["limits"]
    assert hardened["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_deny_policy_blocks_all_egress_including_dns() -> None:
    pod = {"metadata": {"name": "p1", "namespace": "ns", "labels": {
        m.APP_LABEL: m.APP_NAME, m.MANAGED_BY: "farm", m.RUN_LABEL: "r", m.TRIAL_LABEL: "t", m.POD_LABEL: "p1"},
        "annotations": {m.RUN_ANNOTATION: "r"}}}
    (deny,) = m.network_policies(pod, "no-network")
    assert deny["spec"] == {"podSelector": {"matchLabels": {m.POD_LABEL: "p1"}}, "policyTypes": ["Egress"],
                            "egress": []}
    (allow,) = m.network_policies(pod, "public")
    assert "169.254.0.0/16" in allow["spec"]["egress"][0]["to"][0]["ipBlock"]["except"]
    with pytest.raises(ConfigError, match="'sometimes'"):
        m.network_policies(pod, "sometimes")  # type: ignore[arg-type]


def test_names_and_label_values_are_valid_and_unique() -> None:
    long_id = "instance_gravitational__teleport-5dca072bb4301f4579a15364fcf37cc0c39f7f6c"
    a = m.pod_name("sweb-p", long_id, "k1")
    b = m.pod_name("sweb-p", long_id, "k2")
    assert a != b and len(a) <= 63 and len(b) <= 63
    assert m.label_value("abc123") == "abc123"
    v = m.label_value("2026-11-30 run/1 " + "x" * 80)
    assert len(v) <= 63 and v[0].isalnum() and v[-1].isalnum()
    assert m.label_value("run/1") != m.label_value("run 1")


def test_infra_manifests_validate_and_rbac_is_minimal() -> None:
    docs = []
    for path in sorted(INFRA.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["Namespace", "NetworkPolicy", "Role", "RoleBinding", "ServiceAccount", "ServiceAccount"]
    for d in docs:
        validate(d)
    (role,) = [d for d in docs if d["kind"] == "Role"]
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert {r for _, r, _ in granted} == {"pods", "pods/exec", "networkpolicies", "events"}
    assert {v for _, r, v in granted if r == "events"} == {"list"}  # read-only: pull times
    assert ("", "pods/exec", "create") in granted and ("networking.k8s.io", "networkpolicies", "delete") in granted
    assert not any(v in ("*", "escalate", "bind", "impersonate") for _, _, v in granted)
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert policy["spec"]["podSelector"]["matchLabels"] == {m.APP_LABEL: m.APP_NAME}
    assert policy["spec"]["egress"] == [] and policy["spec"]["policyTypes"] == ["Egress"]
    sandbox_ns = {d["metadata"]["namespace"] for d in docs if d["kind"] != "Namespace"}
    assert sandbox_ns == {KubernetesSandboxConfig().namespace}


def test_cluster_doc_matches_the_manifests() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "cluster.md").read_text()
    for path in sorted(INFRA.glob("*.yaml")):
        assert f"kubectl apply -f infra/k8s/{path.name}" in doc
        for d in yaml.safe_load_all(path.read_text()):
            assert d["metadata"]["name"] in doc, (path.name, d["metadata"]["name"])
    assert "infra/k8s/toolbox" in doc and (INFRA / "toolbox" / "Dockerfile").is_file()
    for label in (m.APP_LABEL + "=" + m.APP_NAME, m.RUN_LABEL, m.TRIAL_LABEL, m.POD_LABEL, m.NETWORK_LABEL):
        assert label in doc
    for field in ("namespace", "toolbox_image", "image_registry", "pull_secrets", "runtime_class", "node_selector",
                  "tolerations", "keep_pods", "capabilities", "cpu_limit_factor", "pod_lifetime_s",
                  "unschedulable_grace_s", "public_egress_except", "pull_timeout_s", "pod_start_timeout_s",
                  "max_reconnects", "reconnect_window_s", "keepalive_s"):
        assert f"sandbox.kubernetes.{field}" in doc or f"`{field}`" in doc, field
        assert hasattr(KubernetesSandboxConfig(), field)
    assert KubernetesSandboxConfig().namespace in doc and m.FARM_MOUNT + "/python" in doc
