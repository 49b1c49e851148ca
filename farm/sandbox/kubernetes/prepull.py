"""A DaemonSet that pulls the next N task images onto every sandbox node before trials need them.

Cold pulls of multi-GB benchmark images are the usual cause of slow or lost starts at scale.
The DaemonSet's pod holds one container per image, each only sleeping (with the toolbox's
standalone Python, copied in by an init container as a sandbox pod does, so no image needs a
shell or a sleep binary). A running container keeps its image in use, so the kubelet's image
garbage collection cannot remove it while the run needs it; delete the DaemonSet afterwards.
It uses the sandbox pods' node selector, tolerations, pull secrets and mirror, so it lands
where the trials will run and pulls exactly the references they will.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from farm.config import KubernetesSandboxConfig
from farm.sandbox.relayed import manifests as m

PREPULL_NAME = "farm-prepull"
COMPONENT_LABEL = "app.kubernetes.io/component"
_COPY_PYTHON = (
    "import shutil\n"
    f"shutil.copytree({m.TOOLBOX_PREFIX + '/python'!r},{m.FARM_MOUNT + '/python'!r},symlinks=True,"
    "dirs_exist_ok=True)\n"
)
_SLEEP = "import time\nwhile True:\n    time.sleep(3600)\n"


def next_images(images: Iterable[str], n: int) -> list[str]:
    """The first ``n`` distinct references, in the order the run will need them."""
    if n < 1:
        raise ValueError(f"--next: must be >= 1, got {n!r}")
    return list(dict.fromkeys(images))[:n]


def prepull_daemonset(images: list[str], cfg: KubernetesSandboxConfig, *, name: str = PREPULL_NAME) -> dict[str, Any]:
    """The DaemonSet object (a dict, as ``kubectl apply -f`` takes it) pulling ``images``."""
    if not images:
        raise ValueError("prepull: no images to pull")
    labels = {m.APP_LABEL: PREPULL_NAME, COMPONENT_LABEL: "image-prepull", m.MANAGED_BY: "farm"}
    mount = {"name": "farm", "mountPath": m.FARM_MOUNT}
    sleeper_security = {**m.container_security("none"), "readOnlyRootFilesystem": True}
    tiny = {"requests": {"cpu": "1m", "memory": "16Mi"}, "limits": {"cpu": "50m", "memory": "64Mi"}}
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 1,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": [{
            "name": m.TOOLBOX_CONTAINER, "image": cfg.toolbox_image, "imagePullPolicy": "IfNotPresent",
            "command": [m.TOOLBOX_INIT_PYTHON, "-c", _COPY_PYTHON], "volumeMounts": [mount], "resources": tiny,
            "securityContext": {**sleeper_security, "runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532},
        }],
        "containers": [{
            "name": f"image-{i}", "image": image, "imagePullPolicy": "IfNotPresent",
            "command": [m.PYTHON, "-c", _SLEEP], "volumeMounts": [{**mount, "readOnly": True}],
            "resources": tiny, "securityContext": sleeper_security,
        } for i, image in enumerate(images)],
        "volumes": [{"name": "farm", "emptyDir": {"sizeLimit": "512Mi"}}],
    }
    if cfg.node_selector:
        spec["nodeSelector"] = dict(cfg.node_selector)
    if cfg.tolerations:
        spec["tolerations"] = [dict(t) for t in cfg.tolerations]
    if cfg.pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in cfg.pull_secrets]
    if cfg.priority_class:
        spec["priorityClassName"] = cfg.priority_class
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": cfg.namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {m.APP_LABEL: PREPULL_NAME}},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }
