"""The ``sandbox.*`` sections of the config schema: one typed section per backend.

Part of the schema (farm/config/schema.py, re-exported by farm.config); a module of its own
so that the schema stays readable. The values are validated at load time by
``farm.config.checks.validate``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LocalSandboxConfig:
    root_dir: str | None = None
    allow_any_image: bool = False
    limits: bool = True
    # public-network sandboxes: "isolated" = a private netns with user-mode networking
    # (slirp4netns), host loopback unreachable; "host" = share the host's network
    public_network: str = "isolated"


# Capability profiles of the pod/container spec (farm/sandbox/relayed/manifests.py reads them).
CAPABILITY_PROFILES = ("restricted", "none", "runtime-default")
# Public egress still may not reach cloud metadata or cluster-internal addresses.
DEFAULT_EGRESS_EXCEPT = ("169.254.0.0/16", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")


@dataclass
class KubernetesSandboxConfig:
    """``sandbox.kubernetes.*``: where and how trial pods run (docs/cluster.md)."""

    namespace: str = "farm-sandboxes"
    context: str | None = None
    kubeconfig: str | None = None
    image_registry: str | None = None  # mirror that replaces the images' registry host
    image_lock: str | None = None  # packaged lock name (sweb-v-20260904) or a JSON path
    # where `farm images build --push REGISTRY` put the tasks' Dockerfile builds; with
    # image_policy build | pull-or-build, a task with a Dockerfile runs REGISTRY/farm-task/...:<hash>
    build_registry: str | None = None
    toolbox_image: str = "ghcr.io/farm-eval/farm-toolbox:0.1.0"
    runtime_class: str | None = None  # e.g. gvisor, kata
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    priority_class: str | None = None
    service_account: str | None = None  # its token is never mounted either way
    pull_secrets: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    capabilities: str = "restricted"  # restricted | none | runtime-default
    cpu_limit_factor: float | None = 1.0  # CPU limit = request x factor; null: no CPU limit
    memory_limit: str | None = None  # overrides the task's memory as the limit
    pod_lifetime_s: float | None = None  # activeDeadlineSeconds; null: agent+verifier+build+600
    # the start timeout counts from the image's Pulled event; the pull has its own cap, counted
    # from the pod's creation (a cold pull of a multi-GB image takes minutes)
    pod_start_timeout_s: float = 900.0
    pull_timeout_s: float = 1800.0
    unschedulable_grace_s: float = 120.0  # an autoscaler may still add a node
    agent_network: str | None = None  # override the task's network mode for the agent phase
    verifier_network: str | None = None
    public_egress_except: list[str] = field(default_factory=lambda: list(DEFAULT_EGRESS_EXCEPT))
    keep_pods: bool = False
    # exec streams: at most max_reconnects re-opens in any reconnect_window_s seconds (null: in
    # the pod's whole life); a ping down an idle stream every keepalive_s (null: none), since
    # some clusters cut exec streams idle for ~5 minutes
    max_reconnects: int = 5
    reconnect_window_s: float | None = 600.0
    keepalive_s: float | None = 60.0


@dataclass
class DockerSandboxConfig:
    """``sandbox.docker.*``: the pod semantics on one machine's Docker or Podman."""

    engine: str = "docker"  # docker | podman | a path to either
    toolbox_image: str = "ghcr.io/farm-eval/farm-toolbox:0.1.0"
    image_registry: str | None = None
    image_lock: str | None = None
    # runtime-default: the engine's own set, as Terminal-Bench's Harbor runs a task container; the
    # restricted set fails TB2 tasks whose daemons bind port 22/25 or chroot (docs/sandboxes.md)
    capabilities: str = "runtime-default"  # runtime-default | restricted | none
    cpu_limit_factor: float | None = 1.0
    memory_limit: str | None = None
    pull: str = "missing"  # missing | always | never
    # before a build, farm's oldest task builds are removed until this much is free on the
    # engine's storage (farm/sandbox/images/cache.py); null: never remove any
    image_min_free_gb: float | None = 10.0
    runtime: str | None = None  # e.g. runsc for gVisor
    extra_args: list[str] = field(default_factory=list)
    keep_containers: bool = False
    # one toolbox volume (the agent's Python and programs, mounted read-only) for every sandbox of
    # one toolbox image and farm version, filled once (farm/sandbox/docker/toolbox.py); false: one
    # per sandbox, filled at each start (~0.6 s on podman)
    share_toolbox: bool = True
    max_reconnects: int = 3
    labels: dict[str, str] = field(default_factory=dict)
    # from the task image being present (after its pull or build) to the container answering;
    # the build-step replay after it has the task's own build timeout
    start_timeout_s: float = 900.0


@dataclass
class NullSandboxConfig:
    """``sandbox.none.*``: the benchmark-only backend that isolates and runs nothing (farm/sandbox/none/sandbox.py)."""

    reward: float = 1.0  # the constant every null verifier "writes": rows of sandbox_backend=none measure no agent


@dataclass
class SandboxConfig:
    backend: str = "local"  # local | kubernetes | docker | none (benchmarks of the orchestrator only)
    # the task's image: pull the image it names, build its environment/Dockerfile, or pull and
    # build when the pull fails (farm/sandbox/images/plan.py)
    image_policy: str = "pull-or-build"
    local: LocalSandboxConfig = field(default_factory=LocalSandboxConfig)
    kubernetes: KubernetesSandboxConfig = field(default_factory=KubernetesSandboxConfig)
    docker: DockerSandboxConfig = field(default_factory=DockerSandboxConfig)
    none: NullSandboxConfig = field(default_factory=NullSandboxConfig)
