"""`farm gc` and `farm validate` go through the registry, so they work for every backend
(before, `farm gc` with sandbox.backend=docker ran the Kubernetes branch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.cli import main
from tests.support.tasks import CHECK_ANSWER
from tests.support.tasks import make_task_dir as make_task


def _leftover(root: Path, name: str) -> Path:
    d = root / name
    (d / "fs" / "app").mkdir(parents=True)
    (d / "bwrap.pid").write_text("999999999 1\n")  # its bwrap is gone
    return d


def test_gc_local_collects_dead_sandboxes_and_honours_dry_run(tmp_path: Path, capsys) -> None:
    root = tmp_path / "sandboxes"
    dead = _leftover(root, "crashed-1")
    assert main(["gc", f"sandbox.local.root_dir={root}", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "sandbox.backend=local: would delete 1 directory" in out and dead.exists()
    assert main(["gc", f"sandbox.local.root_dir={root}"]) == 0
    assert "sandbox.backend=local: deleted 1 directory" in capsys.readouterr().out and not dead.exists()


@pytest.mark.engine
@pytest.mark.root
def test_gc_docker_runs_the_container_branch(tmp_path: Path, capsys) -> None:
    assert main(["gc", "sandbox=docker", "sandbox.docker.engine=podman", f"store.uri={tmp_path / 'store'}",
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "sandbox.backend=docker: would delete" in out and "pod" not in out


def test_validate_reports_what_the_backend_cannot_run(tmp_path: Path, capsys) -> None:
    tasks = tmp_path / "tasks"
    make_task(tasks, "runs", CHECK_ANSWER)
    d = make_task(tasks, "needs-image", CHECK_ANSWER)
    (d / "environment" / "Dockerfile").write_text("FROM someone/thing:tag\n")
    assert main(["validate", f"benchmark.path={tasks}"]) == 0
    out = capsys.readouterr().out
    assert "sandbox.backend=local: 1 runnable" in out
    assert "not runnable (task_unsupported:image_refused): needs-image" in out
    assert main(["validate", f"benchmark.path={tasks}", "sandbox=kubernetes"]) == 0
    assert "sandbox.backend=kubernetes: 2 runnable" in capsys.readouterr().out


def test_validate_checks_the_backend_can_be_driven_from_here(capsys) -> None:
    assert main(["validate", "sandbox=docker", "sandbox.docker.engine=/nonexistent/docker"]) == 2
    err = capsys.readouterr().err
    assert "sandbox.docker.engine" in err and "/nonexistent/docker" in err


def test_gc_kubernetes_without_credentials_is_a_config_error(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "no-kubeconfig"
    assert main(["gc", "sandbox=kubernetes", f"sandbox.kubernetes.kubeconfig={missing}"]) == 2
    err = capsys.readouterr().err
    assert "sandbox.kubernetes.kubeconfig" in err and "no-kubeconfig" in err and "Traceback" not in err
