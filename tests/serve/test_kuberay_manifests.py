"""Offline validation of infra/kuberay/: core kinds and every pod template against the Kubernetes
schemas (kubernetes-validate), KubeRay CRD fields against the RayService/RayCluster/RayJob
types of KubeRay v1, and the cross-references between the manifests, farm's presets and
farm's config loader. No cluster is needed (none can run here)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from farm.config import load_config
from farm.serve.app import llm_config

ROOT = Path(__file__).resolve().parents[2]
KUBERAY = ROOT / "infra" / "kuberay"
K8S_VERSION = "1.33.0"
RAY_VERSION = "2.60.0"

# Field names of ray-operator/apis/ray/v1 (rayservice_types.go, raycluster_types.go, rayjob_types.go).
RAYSERVICE_SPEC = {"serveConfigV2", "rayClusterConfig", "upgradeStrategy", "rayClusterDeletionDelaySeconds",
                   "excludeHeadPodFromServeSvc", "serveService", "serviceUnhealthySecondThreshold",
                   "deploymentUnhealthySecondThreshold"}
RAYCLUSTER_SPEC = {"rayVersion", "enableInTreeAutoscaling", "autoscalerOptions", "headGroupSpec", "workerGroupSpecs",
                   "headServiceAnnotations", "suspend", "gcsFaultToleranceOptions", "managedBy", "authOptions"}
HEAD_GROUP = {"rayStartParams", "template", "serviceType", "headService", "enableIngress"}
WORKER_GROUP = {"groupName", "replicas", "minReplicas", "maxReplicas", "numOfHosts", "rayStartParams", "template",
                "idleTimeoutSeconds", "suspend", "scaleStrategy"}
RAYJOB_SPEC = {"entrypoint", "runtimeEnvYAML", "entrypointNumCpus", "entrypointNumGpus", "entrypointResources",
               "submissionMode", "shutdownAfterJobFinishes", "ttlSecondsAfterFinished", "activeDeadlineSeconds",
               "backoffLimit", "rayClusterSpec", "clusterSelector", "jobId", "suspend", "submitterPodTemplate",
               "submitterConfig", "deletionPolicy", "metadata"}
SUBMISSION_MODES = {"K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"}
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"


def docs() -> list[dict[str, Any]]:
    out = []
    for path in sorted(KUBERAY.glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def one(kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs() if d["kind"] == kind]
    return doc


def cluster_specs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for d in docs():
        if d["kind"] == "RayService":
            out.append((d["metadata"]["name"], d["spec"]["rayClusterConfig"]))
        elif d["kind"] == "RayCluster":
            out.append((d["metadata"]["name"], d["spec"]))
        elif d["kind"] == "RayJob" and "rayClusterSpec" in d["spec"]:
            out.append((d["metadata"]["name"], d["spec"]["rayClusterSpec"]))
    return out


def rayjobs() -> list[dict[str, Any]]:
    return [d for d in docs() if d["kind"] == "RayJob"]


def test_every_manifest_is_a_known_kind():
    kinds = sorted(d["kind"] for d in docs())
    assert kinds == ["Namespace", "RayCluster", "RayJob", "RayJob", "RayService"]
    for d in docs():
        if d["apiVersion"] == "ray.io/v1":
            assert d["metadata"]["namespace"] and d["metadata"]["name"]


def test_core_kinds_validate():
    for d in docs():
        if d["apiVersion"] == "v1":
            kubernetes_validate.validate(d, K8S_VERSION, strict=True)


@pytest.mark.parametrize("name,spec", cluster_specs(), ids=[n for n, _ in cluster_specs()])
def test_ray_cluster_specs(name, spec):
    assert set(spec) <= RAYCLUSTER_SPEC, set(spec) - RAYCLUSTER_SPEC
    assert spec["rayVersion"] == RAY_VERSION
    head = spec["headGroupSpec"]
    assert set(head) <= HEAD_GROUP
    groups = [("head", head)] + [(g["groupName"], g) for g in spec["workerGroupSpecs"]]
    for gname, g in groups:
        if gname != "head":
            assert set(g) <= WORKER_GROUP, set(g) - WORKER_GROUP
            assert g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]
        # KubeRay passes rayStartParams to `ray start` as strings
        assert all(isinstance(v, str) for v in g["rayStartParams"].values()), g["rayStartParams"]
        meta = {"name": f"{name}-{gname}", **g["template"].get("metadata", {})}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
               "spec": g["template"]["spec"]}
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        for c in g["template"]["spec"]["containers"]:
            assert c["image"] and c["resources"]["limits"]["memory"], c["name"]
            assert c["resources"]["requests"] == c["resources"]["limits"]  # Guaranteed QoS: no eviction mid-run
    assert head["rayStartParams"]["num-cpus"] == "0"
    if name != "frognano-4b":  # the eval clusters' job API takes only the operator-made token
        assert spec["authOptions"] == {"mode": "token"}


def test_rayservice_serves_the_frognano_preset():
    svc = one("RayService")
    assert set(svc["spec"]) <= RAYSERVICE_SPEC
    serve = yaml.safe_load(svc["spec"]["serveConfigV2"])
    (app,) = serve["applications"]
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    want = llm_config(load_config([
        "model=frognano-4b", "model.serving.min_replicas=2", "model.serving.max_replicas=8",
    ]))
    assert app["args"]["llm_configs"] == [want]  # the manifest is the preset, not a copy that drifts
    assert serve["http_options"] == {"host": "0.0.0.0", "port": 8000}
    gpu = svc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    limits = gpu["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert int(limits["nvidia.com/gpu"]) == want["engine_kwargs"]["tensor_parallel_size"]
    auto = want["deployment_config"]["autoscaling_config"]
    assert gpu["maxReplicas"] >= auto["max_replicas"]  # room for every replica the autoscaler may add
    for c in gpu["template"]["spec"]["containers"]:
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["RAY_SERVE_SESSION_ID_HEADER_KEY"] == "x-farm-session"


@pytest.mark.parametrize("job", rayjobs(), ids=[j["metadata"]["name"] for j in rayjobs()])
def test_rayjob_runs_the_eval_against_the_service(job):
    cluster, svc = one("RayCluster"), one("RayService")
    spec = job["spec"]
    assert set(spec) <= RAYJOB_SPEC, set(spec) - RAYJOB_SPEC
    assert spec["submissionMode"] in SUBMISSION_MODES
    assert ("clusterSelector" in spec) != ("rayClusterSpec" in spec)
    assert job["metadata"]["namespace"] == cluster["metadata"]["namespace"]
    if "clusterSelector" in spec:
        assert spec["clusterSelector"] == {"ray.io/cluster": cluster["metadata"]["name"]}
        # no submitter pod whose loss re-submits the driver; SidecarMode cannot use an existing cluster
        assert spec["submissionMode"] == "HTTPMode"
        assert KUEUE_QUEUE not in job["metadata"]["labels"]  # Kueue refuses a job on an existing cluster
    else:
        assert spec["submissionMode"] == "SidecarMode"
        head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
        assert head["restartPolicy"] == "Never"  # the submitter lives in the head pod
        assert "submitterPodTemplate" not in spec and spec["shutdownAfterJobFinishes"] is True
    if KUEUE_QUEUE in job["metadata"]["labels"]:
        # Kueue admits a suspended job that owns its cluster, of a fixed size
        assert spec["suspend"] is True and "rayClusterSpec" in spec and spec["shutdownAfterJobFinishes"]
        groups = spec["rayClusterSpec"]["workerGroupSpecs"]
        assert all(g["minReplicas"] == g["replicas"] == g["maxReplicas"] for g in groups)
        assert not spec["rayClusterSpec"].get("enableInTreeAutoscaling")
    yaml.safe_load(spec["runtimeEnvYAML"])
    argv = shlex.split(spec["entrypoint"])
    assert argv[:2] == ["python", "/opt/farm/jobs/eval.py"] and (ROOT / "jobs" / "eval.py").is_file()
    cfg = load_config(argv[2:])  # the job's overrides are valid farm config
    url = f"http://{svc['metadata']['name']}-serve-svc.{svc['metadata']['namespace']}.svc:8000/v1"
    assert cfg.model.base_url == url and cfg.model.name == "frognano-4b"
    assert cfg.sandbox.backend == "kubernetes" and cfg.store.uri.startswith("s3://")
    assert cfg.sandbox.kubernetes.namespace == cluster["metadata"]["namespace"]


def test_one_rayjob_is_queued_by_kueue_and_the_run_ids_differ():
    jobs = rayjobs()
    assert sum(KUEUE_QUEUE in j["metadata"]["labels"] for j in jobs) == 1
    ids = [load_config(shlex.split(j["spec"]["entrypoint"])[2:]).run.id for j in jobs]
    assert len(set(ids)) == len(ids)  # two jobs on one run id would resume each other's run


def test_eval_pods_use_the_driver_service_account():
    cluster = one("RayCluster")
    rbac = [d for d in yaml.safe_load_all((ROOT / "infra" / "k8s" / "rbac.yaml").read_text()) if d]
    accounts = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in rbac if d["kind"] == "ServiceAccount"}
    for g in [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]:
        sa = g["template"]["spec"]["serviceAccountName"]
        assert (cluster["metadata"]["namespace"], sa) in accounts
