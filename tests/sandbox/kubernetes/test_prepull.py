"""The optional pre-pull DaemonSet (issue 15 item 3): the next N images of a run pulled onto
every sandbox node ahead of the trials, validated offline against the Kubernetes schema."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from farm.config import KubernetesSandboxConfig, load_config
from farm.errors import ConfigError
from farm.sandbox.images.cli import prepull_images
from farm.sandbox.kubernetes.prepull import next_images, prepull_daemonset
from farm.sandbox.relayed import manifests as m
from tests.shared import shared_path

from .fake_cluster import validate_object

EXAMPLE = Path(__file__).resolve().parents[3] / "infra" / "k8s" / "prepull" / "prepull-daemonset.yaml"
HARDENED = KubernetesSandboxConfig(
    node_selector={"farm.dev/pool": "sandbox"}, pull_secrets=["mirror-creds"], priority_class="farm-low",
    tolerations=[{"key": "farm.dev/sandbox", "operator": "Exists", "effect": "NoSchedule"}])


def test_next_images_keeps_plan_order_without_repeats() -> None:
    assert next_images(["a", "b", "a", "c", "b", "d"], 3) == ["a", "b", "c"]
    assert next_images(["a"], 10) == ["a"]
    with pytest.raises(ValueError, match="--next: must be >= 1, got 0"):
        next_images(["a"], 0)


@pytest.mark.parametrize("cfg", [KubernetesSandboxConfig(), HARDENED], ids=["default", "hardened"])
def test_the_daemonset_validates_and_lands_where_sandboxes_run(cfg: KubernetesSandboxConfig) -> None:
    images = ["swebench/sweb.eval.x86_64.django_1776_django-14404@sha256:" + "a" * 64, "python:3.12-slim"]
    ds = prepull_daemonset(images, cfg)
    validate_object(ds)
    spec = ds["spec"]["template"]["spec"]
    assert [c["image"] for c in spec["containers"]] == images  # one sleeping container per image
    assert all(c["command"][0] == m.PYTHON for c in spec["containers"])  # no shell needed in the image
    assert spec["initContainers"][0]["image"] == cfg.toolbox_image
    assert spec.get("nodeSelector", {}) == cfg.node_selector
    assert spec.get("tolerations", []) == cfg.tolerations
    assert [s["name"] for s in spec.get("imagePullSecrets", [])] == cfg.pull_secrets
    # not a sandbox: farm gc and the default-deny policy select app=farm-sandbox only
    assert ds["metadata"]["labels"][m.APP_LABEL] != m.APP_NAME
    assert ds["metadata"]["namespace"] == cfg.namespace and spec["automountServiceAccountToken"] is False


def test_farm_images_prepull_prints_the_manifest_of_the_runs_images() -> None:
    tasks_dir = shared_path("fixtures", "harbor", "swebench-verified")
    cfg = load_config([f"benchmark.path={tasks_dir}"])
    out, err = Console(file=io.StringIO(), width=400), Console(file=io.StringIO(), width=400)
    assert prepull_images(cfg, next_n=5, out=out, err=err) == 0
    ds = yaml.safe_load(out.file.getvalue())  # type: ignore[attr-defined]
    validate_object(ds)
    images = [c["image"] for c in ds["spec"]["template"]["spec"]["containers"]]
    assert len(images) == 2 and all("sweb.eval" in i for i in images)
    assert "2 of 2 distinct images" in err.file.getvalue()  # type: ignore[attr-defined]
    # the example in infra/ is this output: regenerate it with the command in its header
    example = EXAMPLE.read_text()
    assert yaml.safe_load(example) == ds
    with pytest.raises(ConfigError, match="'--next': must be >= 1"):
        prepull_images(cfg, next_n=0, out=out, err=err)


def test_the_command_line_prints_the_same_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    from farm.cli import main

    tasks_dir = shared_path("fixtures", "harbor", "swebench-verified")
    assert main(["images", "prepull", "--next", "1", f"benchmark.path={tasks_dir}"]) == 0
    ds = yaml.safe_load(capsys.readouterr().out)
    validate_object(ds)
    assert len(ds["spec"]["template"]["spec"]["containers"]) == 1  # --next reached the builder
