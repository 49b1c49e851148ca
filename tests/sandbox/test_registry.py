"""The backend registry: every configurable backend is registered, opens a sandbox from its
own config section, refuses what it cannot run with a reason (the preflight), and the run
layer reaches backends only through it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from farm.config import CHOICES, KubernetesSandboxConfig, LocalSandboxConfig, SandboxConfig
from farm.errors import ConfigError, UnsupportedTaskError
from farm.sandbox.base import Capabilities, CapabilityError
from farm.sandbox.registry import BACKEND_MODULES, check_task, get_backend, open_sandbox
from farm.tasks.model import BuildStep
from tests.support.tasks import make_task

REPO = Path(__file__).resolve().parents[2]
BACKEND_IMPLEMENTATIONS = {"farm.sandbox.local.sandbox", "farm.sandbox.kubernetes.sandbox",
                           "farm.sandbox.docker.sandbox", "farm.sandbox.relayed.sandbox",
                           "farm.sandbox.relayed.channel", "farm.sandbox.local.policy", "farm.sandbox.local.netns"}


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_every_configurable_backend_is_registered_under_its_name() -> None:
    assert set(BACKEND_MODULES) == set(CHOICES["sandbox.backend"])
    for name in CHOICES["sandbox.backend"]:
        assert get_backend(name).name == name
    with pytest.raises(ConfigError, match="'podman-kube'.*sandbox.backend"):
        get_backend("podman-kube")


def test_the_run_layer_names_no_backend_module() -> None:
    for path in sorted((REPO / "farm" / "run").glob("*.py")):
        assert not _imports(path) & BACKEND_IMPLEMENTATIONS, path.name


def test_manifests_and_config_import_no_backend() -> None:
    """The pod spec and the config are lower floors: no cycle back into a backend."""
    paths = [REPO / "farm" / "sandbox" / "relayed" / "manifests.py", *sorted((REPO / "farm" / "config").glob("*.py"))]
    assert len(paths) > 2
    for path in paths:
        sandbox = {i for i in _imports(path) if i == "farm.sandbox" or i.startswith("farm.sandbox.")}
        assert not sandbox - {"farm.sandbox.relayed.manifests"}, path


def test_choosing_local_imports_no_cluster_client() -> None:
    code = ("import sys; import farm.run.driver; from farm.sandbox.registry import get_backend; "
            "get_backend('local'); "
            "print(sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith(('farm.sandbox.kubernetes', "
            "'farm.sandbox.docker'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.bwrap
async def test_open_sandbox_applies_the_local_section_and_states_its_capabilities(tmp_path: Path) -> None:
    cfg = SandboxConfig(backend="local", local=LocalSandboxConfig(root_dir=str(tmp_path / "root"),
                                                                  allow_any_image=True, limits=False))
    sb = open_sandbox(make_task(image="someone/thing:tag"), cfg, network="no-network", run_id="r", trial_key="k")
    assert sb.capabilities == Capabilities(set_network=False, isolated_commands=True, private_verifier=True)
    await sb.start()  # allow_any_image: the section reached the sandbox
    try:
        assert sb.stats.extra["limits"] == "disabled"
        assert any((tmp_path / "root").iterdir())
        with pytest.raises(CapabilityError):
            await sb.set_network("public")
    finally:
        await sb.close()


def test_pods_can_switch_their_network_in_place() -> None:
    from farm.sandbox.docker.sandbox import ContainerSandbox
    from farm.sandbox.kubernetes.sandbox import KubernetesSandbox

    assert KubernetesSandbox.capabilities.set_network is True
    assert ContainerSandbox.capabilities.set_network is False


def _reason(task, cfg: SandboxConfig) -> str | None:
    try:
        check_task(task, cfg)
    except UnsupportedTaskError as exc:
        return exc.reason
    return None


def test_preflight_reasons_per_backend() -> None:
    local = SandboxConfig(backend="local")
    kube = SandboxConfig(backend="kubernetes")
    docker = SandboxConfig(backend="docker")
    prebuilt = make_task(image="someone/thing:tag")
    into_usr = make_task(image="python:3.11", build_steps=(BuildStep("workdir", "/usr/src/app"),))
    bad_step = make_task(image="python:3.11", build_steps=(BuildStep("volume", "/data"),))
    no_image = make_task(image=None)
    from_stage = make_task(image="python:3.11",
                           build_steps=(BuildStep("copy", "/out/app", "/app/", from_stage="builder"),))

    assert _reason(prebuilt, local) == "image_refused"
    assert _reason(prebuilt, kube) is None and _reason(prebuilt, docker) is None
    assert _reason(into_usr, local) == "dockerfile_instruction" and _reason(into_usr, kube) is None
    assert _reason(bad_step, local) == "task_format" and _reason(bad_step, docker) == "task_format"
    assert _reason(from_stage, local) == "dockerfile_instruction"
    assert _reason(from_stage, kube) == "dockerfile_instruction"  # a pod replays steps on the base image too
    assert _reason(no_image, local) is None
    assert _reason(no_image, kube) == "no_image" and _reason(no_image, docker) == "no_image"
    locked = SandboxConfig(backend="kubernetes", kubernetes=KubernetesSandboxConfig(image_lock="sweb-v-20260904"))
    assert _reason(prebuilt, locked) == "image_lock"


def test_which_backends_keep_the_verifier_private_and_list_system_changes() -> None:
    # docs/integrity.md, "What each backend enforces": pods under the restricted standard have no
    # CAP_SYS_ADMIN for the verifier's mount namespace; no engine diffs a pod against its image,
    # so its system changes are found by inode change time since the start (relayed/ctime_scan.py)
    from farm.sandbox.docker.sandbox import ContainerSandbox
    from farm.sandbox.kubernetes.sandbox import KubernetesSandbox
    from farm.sandbox.none.sandbox import NullSandbox

    assert (ContainerSandbox.capabilities.private_verifier, ContainerSandbox.capabilities.system_diff) == (True, True)
    assert (KubernetesSandbox.capabilities.private_verifier, KubernetesSandbox.capabilities.system_diff) == (False,
                                                                                                           True)
    assert NullSandbox.capabilities.private_verifier is False
