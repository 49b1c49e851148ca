"""Pure functions that turn a Task plus backend settings into Kubernetes objects (plain dicts).

Nothing here talks to a cluster, so every object farm would create can be validated offline
against the official schema (tests/sandbox/kubernetes) and run through `podman kube play`. The Kubernetes
backend, the container backend and `farm gc` all derive names and labels from this module,
which keeps the label contract in one place:

  app.kubernetes.io/name=farm-sandbox   every sandbox pod and its policies (the infra/ default
                                        deny policy selects on it)
  farm.dev/run-id, farm.dev/trial-key   who owns the pod; `farm gc` deletes by run id
  farm.dev/pod                          the pod's own name; its NetworkPolicies select on it
  farm.dev/network                      public | no-network, for people reading `kubectl get`
Full (unsanitised) run id, trial key and task id are kept in annotations.
"""

from __future__ import annotations

import base64
import hashlib
import io
import math
import re
import tarfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from farm.config import CAPABILITY_PROFILES, DEFAULT_EGRESS_EXCEPT, KubernetesSandboxConfig
from farm.errors import ConfigError
from farm.tasks.model import NetworkMode, Task

APP_LABEL = "app.kubernetes.io/name"
APP_NAME = "farm-sandbox"
MANAGED_BY = "app.kubernetes.io/managed-by"
RUN_LABEL = "farm.dev/run-id"
TRIAL_LABEL = "farm.dev/trial-key"
POD_LABEL = "farm.dev/pod"
ROLE_LABEL = "farm.dev/role"
NETWORK_LABEL = "farm.dev/network"
BENCHMARK_LABEL = "farm.dev/benchmark"
RUN_ANNOTATION = "farm.dev/run-id"
TRIAL_ANNOTATION = "farm.dev/trial-key"
TASK_ANNOTATION = "farm.dev/task"
CREATED_ANNOTATION = "farm.dev/created-at"
DEADLINE_ANNOTATION = "farm.dev/deadline-s"
WORKDIR_ANNOTATION = "farm.dev/workdir"

TASK_CONTAINER = "task"
TOOLBOX_CONTAINER = "farm-toolbox"
FARM_MOUNT = "/.farm"  # shared volume: standalone Python + sandbox-agent programs
TOOLBOX_PREFIX = "/opt/farm"  # where the toolbox image keeps python/ (see infra/k8s/toolbox)
TOOLBOX_INIT_PYTHON = "/usr/bin/python3"  # the toolbox's own Python, runs the init script
PYTHON = f"{FARM_MOUNT}/python/bin/python3"
INSIDE_DIR = f"{FARM_MOUNT}/inside"
RELAY = f"{INSIDE_DIR}/relay.py"
SERVER = f"{INSIDE_DIR}/server.py"

# Capabilities a root process in a benchmark image needs to install packages, chown files and
# signal its own children; everything else (NET_RAW, MKNOD, SYS_CHROOT, SETPCAP, ...) is dropped.
ROOT_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID")

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _digest(text: str, n: int = 10) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def label_value(text: str) -> str:
    """A valid label value (<= 63 chars, [A-Za-z0-9._-], alphanumeric ends) that stays unique.

    Values that are already valid pass unchanged, so selectors on plain hex keys still work.
    """
    if len(text) <= 63 and _LABEL_VALUE.match(text):
        return text
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-_.")
    clean = clean[:52].rstrip("-_.")
    return f"{clean}-{_digest(text)}" if clean else _digest(text, 20)


def pod_name(prefix: str, task_id: str, trial_key: str, attempt: int = 0, suffix: str = "") -> str:
    """DNS-1123 name <= 63 chars, unique per (task, trial, attempt, suffix)."""
    raw = f"{prefix}-{task_id}-{trial_key}-{attempt}{'-' + suffix if suffix else ''}"
    body = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")[:52].rstrip("-")
    return f"{body}-{_digest(raw)}"


def cpu_quantity(cpus: float) -> str:
    return f"{max(1, int(math.ceil(cpus * 1000)))}m"


def resources(task: Task, cfg: KubernetesSandboxConfig) -> dict[str, Any]:
    r = task.environment.resources
    requests = {
        "cpu": cpu_quantity(r.cpus),
        "memory": f"{int(r.memory_mb)}Mi",
        "ephemeral-storage": f"{int(r.storage_mb)}Mi",
    }
    limits = {"memory": cfg.memory_limit or requests["memory"],
              "ephemeral-storage": requests["ephemeral-storage"]}
    # The vendor's pods run with CPU limit == request; a factor > 1 lets test suites burst.
    if cfg.cpu_limit_factor is not None:
        limits["cpu"] = cpu_quantity(r.cpus * cfg.cpu_limit_factor)
    return {"requests": requests, "limits": limits}


def pod_deadline_s(task: Task, cfg: KubernetesSandboxConfig) -> int:
    """activeDeadlineSeconds: after this the kubelet kills the pod even if farm crashed."""
    if cfg.pod_lifetime_s:
        return int(cfg.pod_lifetime_s)
    return int(task.agent_timeout_s + task.verifier_timeout_s + task.environment.build_timeout_s + 600)


def container_security(profile: str) -> dict[str, Any]:
    if profile not in CAPABILITY_PROFILES:
        raise ConfigError(
            f"sandbox.kubernetes.capabilities: invalid value {profile!r}; expected one of {CAPABILITY_PROFILES}"
        )
    sc: dict[str, Any] = {"allowPrivilegeEscalation": False, "privileged": False}
    if profile == "restricted":
        sc["capabilities"] = {"drop": ["ALL"], "add": list(ROOT_CAPS)}
    elif profile == "none":
        sc["capabilities"] = {"drop": ["ALL"]}
    return sc


def pack_inside(directory: Path, extra: Iterable[Path] = ()) -> str:
    """The sandbox-agent programs as base64 of a deterministic tar.gz (*.py only).

    Shipping them inside the Pod object (the init container unpacks them) keeps the agent's
    code in lockstep with the driver without a ConfigMap (and without the RBAC for one).
    """
    files = sorted(p for p in Path(directory).glob("*.py") if p.is_file())
    files += [Path(p) for p in extra]
    buf = io.BytesIO()
    import gzip

    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w") as tar:
            for f in files:
                data = f.read_bytes()
                info = tarfile.TarInfo(f.name)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode("ascii")


# Runs in the init container with the toolbox's own Python: copy the standalone interpreter
# into the shared volume and unpack the agent programs passed as argv[1].
INIT_SCRIPT = (
    "import base64,io,os,shutil,sys,tarfile\n"
    f"shutil.copytree({TOOLBOX_PREFIX + '/python'!r},{FARM_MOUNT + '/python'!r},symlinks=True,dirs_exist_ok=True)\n"
    f"os.makedirs({INSIDE_DIR!r},exist_ok=True)\n"
    "t=tarfile.open(fileobj=io.BytesIO(base64.b64decode(sys.argv[1])),mode='r:gz')\n"
    f"t.extractall({INSIDE_DIR!r})\n"
    "print('farm toolbox ready',flush=True)\n"
)


def socket_name(name: str) -> str:
    """Abstract unix-socket name of a pod's relay (per network namespace, so per pod)."""
    return f"farm-agent-{name}"


def pod_manifest(
    task: Task,
    cfg: KubernetesSandboxConfig,
    *,
    name: str,
    run_id: str,
    trial_key: str,
    image: str,
    inside_b64: str,
    network: NetworkMode,
    role: str = "agent",
    env: Mapping[str, str] | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """The Pod for one trial: the task image as container ``task`` running the relay as PID 1."""
    labels = {
        **{str(k): str(v) for k, v in cfg.labels.items()},
        APP_LABEL: APP_NAME,
        MANAGED_BY: "farm",
        RUN_LABEL: label_value(run_id),
        TRIAL_LABEL: label_value(trial_key),
        POD_LABEL: name,
        ROLE_LABEL: label_value(role),
        NETWORK_LABEL: network,
        BENCHMARK_LABEL: label_value(task.benchmark),
    }
    deadline = pod_deadline_s(task, cfg)
    annotations = {
        RUN_ANNOTATION: run_id,
        TRIAL_ANNOTATION: trial_key,
        TASK_ANNOTATION: f"{task.benchmark}/{task.task_id}",
        CREATED_ANNOTATION: str(int(now if now is not None else time.time())),
        DEADLINE_ANNOTATION: str(deadline),
        # not the container's workingDir: podman refuses one the image lacks; every request
        # carries its cwd and the backend creates the workdir before the first one
        WORKDIR_ANNOTATION: task.workdir,
    }
    task_env = {**task.environment.env, **(env or {})}
    volume_mount = {"name": "farm", "mountPath": FARM_MOUNT}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": deadline,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        # the relay must be PID 1 of the task container's own PID namespace: then no command of
        # the agent can kill it, and it restarts a sandbox agent a command killed (relay.py).
        # A shared namespace would make the pause container PID 1 and the relay killable.
        "shareProcessNamespace": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": [
            {
                "name": TOOLBOX_CONTAINER,
                "image": cfg.toolbox_image,
                "imagePullPolicy": "IfNotPresent",
                "command": [TOOLBOX_INIT_PYTHON, "-c", INIT_SCRIPT, inside_b64],
                "volumeMounts": [volume_mount],
                "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "64Mi"},
                    "limits": {"cpu": "500m", "memory": "256Mi", "ephemeral-storage": "256Mi"},
                },
                "securityContext": {
                    **container_security("none"),
                    "readOnlyRootFilesystem": True,
                    "runAsNonRoot": True,
                    "runAsUser": 65532,
                    "runAsGroup": 65532,
                },
            }
        ],
        "containers": [
            {
                "name": TASK_CONTAINER,
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                # PID 1 is the relay; it starts the sandbox agent and outlives exec streams.
                "command": [PYTHON, RELAY, "serve", socket_name(name), PYTHON, SERVER],
                "env": [{"name": k, "value": str(v)} for k, v in sorted(task_env.items())],
                "resources": resources(task, cfg),
                "securityContext": container_security(cfg.capabilities),
                "volumeMounts": [{**volume_mount, "readOnly": True}],
            }
        ],
        "volumes": [{"name": "farm", "emptyDir": {"sizeLimit": "512Mi"}}],
    }
    if cfg.runtime_class:
        spec["runtimeClassName"] = cfg.runtime_class
    if cfg.service_account:
        spec["serviceAccountName"] = cfg.service_account
    if cfg.pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in cfg.pull_secrets]
    if cfg.node_selector:
        spec["nodeSelector"] = {str(k): str(v) for k, v in cfg.node_selector.items()}
    if cfg.tolerations:
        spec["tolerations"] = [dict(t) for t in cfg.tolerations]
    if cfg.priority_class:
        spec["priorityClassName"] = cfg.priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": cfg.namespace, "labels": labels,
                     "annotations": annotations},
        "spec": spec,
    }


def _policy_meta(pod: Mapping[str, Any], suffix: str, owner_uid: str | None) -> dict[str, Any]:
    meta = pod["metadata"]
    labels = {k: meta["labels"][k] for k in (APP_LABEL, MANAGED_BY, RUN_LABEL, TRIAL_LABEL, POD_LABEL)}
    out: dict[str, Any] = {
        "name": f"{meta['name']}-{suffix}",
        "namespace": meta["namespace"],
        "labels": labels,
        "annotations": {RUN_ANNOTATION: meta["annotations"][RUN_ANNOTATION]},
    }
    if owner_uid:
        # Deleting the pod (or the kubelet's deadline plus `farm gc`) takes the policy with it.
        out["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                   "uid": owner_uid, "blockOwnerDeletion": False}]
    return out


def deny_egress_policy(pod: Mapping[str, Any], owner_uid: str | None = None) -> dict[str, Any]:
    """No egress at all, DNS included; ingress is left alone (exec does not use the pod network)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _policy_meta(pod, "deny-egress", owner_uid),
        "spec": {
            "podSelector": {"matchLabels": {POD_LABEL: pod["metadata"]["name"]}},
            "policyTypes": ["Egress"],
            "egress": [],
        },
    }


def allow_egress_policy(
    pod: Mapping[str, Any], owner_uid: str | None = None,
    except_cidrs: Iterable[str] = DEFAULT_EGRESS_EXCEPT,
) -> dict[str, Any]:
    """Public internet plus cluster DNS; opens a hole in the namespace's default-deny policy."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _policy_meta(pod, "allow-egress", owner_uid),
        "spec": {
            "podSelector": {"matchLabels": {POD_LABEL: pod["metadata"]["name"]}},
            "policyTypes": ["Egress"],
            "egress": [
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(except_cidrs)}}]},
                {
                    "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
            ],
        },
    }


def network_policies(
    pod: Mapping[str, Any], network: NetworkMode, owner_uid: str | None = None,
    except_cidrs: Iterable[str] = DEFAULT_EGRESS_EXCEPT,
) -> list[dict[str, Any]]:
    if network == "no-network":
        return [deny_egress_policy(pod, owner_uid)]
    if network == "public":
        return [allow_egress_policy(pod, owner_uid, except_cidrs)]
    raise ConfigError(f"network: invalid value {network!r}; expected 'public' or 'no-network'")
