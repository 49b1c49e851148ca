"""Image policy without an engine: the content-hashed tag, the policy decisions, the config
values, and the local backend's handling of tasks that name a prebuilt image."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from farm.config import load_config
from farm.errors import ConfigError, UnsupportedTaskError
from farm.sandbox.images.ensure import failing_step
from farm.sandbox.images.plan import build_digest, plan_image, registry_prefix, task_build_tag, task_tag
from farm.sandbox.local.policy import plan_local
from tests.support.images import harbor_task
from tests.support.tasks import make_task

DIGEST = "0123456789abcdef" * 4


# --- the tag --------------------------------------------------------------------------------


def test_tag_names_benchmark_task_and_hash_and_is_a_valid_reference() -> None:
    task = make_task(task_id="Fix_Git!!v2")
    assert task_tag(task, DIGEST) == "localhost/farm-task/conformance-fix_git-v2:0123456789abcdef"
    assert task_tag(task, DIGEST, "registry.example.com:5000/team/") == \
        "registry.example.com:5000/team/farm-task/conformance-fix_git-v2:0123456789abcdef"


def test_digest_follows_every_input_of_the_build(tmp_path: Path) -> None:
    task = harbor_task(tmp_path, "FROM debian:bookworm\nCOPY . /app\n", files={"a.sh": "echo a\n", "sub/b": "b"})
    ctx, df = task.environment.build_context, task.environment.dockerfile
    assert ctx is not None and df is not None
    first = build_digest(df, ctx)
    assert build_digest(df, ctx) == first  # stable
    seen = {first}

    def changed() -> str:
        d = build_digest(df, ctx)
        assert d not in seen, "the digest did not change"
        seen.add(d)
        return d

    (ctx / "sub" / "b").write_text("B")  # same size, other bytes
    changed()
    os.chmod(ctx / "a.sh", 0o755)  # mode only
    changed()
    (ctx / "sub" / "b").rename(ctx / "sub" / "c")  # path only
    changed()
    (ctx / "new").write_text("")  # an added empty file
    changed()
    df.write_text("FROM debian:bookworm\nCOPY . /srv\n")
    tag = task_build_tag(task)
    assert tag == task_tag(task, changed())


def test_failing_step_is_read_from_each_builders_log() -> None:
    podman = "STEP 1/3: FROM base\nSTEP 2/3: RUN echo ok\nok\nSTEP 3/3: RUN exit 3\nError: building at STEP"
    buildkit = "#5 [1/2] FROM docker.io/library/debian\n#6 [2/2] RUN exit 3\n#6 ERROR: process did not complete"
    legacy = "Step 1/2 : FROM debian\nStep 2/2 : RUN exit 3\nThe command returned a non-zero code: 3"
    assert failing_step(podman) == failing_step(buildkit) == failing_step(legacy) == "RUN exit 3"
    assert failing_step("Error: no such file Dockerfile") is None


# --- the policy -----------------------------------------------------------------------------


def test_policy_decisions(tmp_path: Path) -> None:
    prebuilt = harbor_task(tmp_path, "FROM debian:bookworm\nRUN true\n", docker_image="org/task:1", name="pre")
    own = harbor_task(tmp_path, "FROM debian:bookworm\nRUN true\n", name="own")
    bare = make_task(image="org/only-an-image:1")
    plans = {(t, p): plan_image(task, p) for t, task in (("pre", prebuilt), ("own", own), ("bare", bare))
             for p in ("pull", "build", "pull-or-build")}
    # pull: today's behaviour, the named image with the interpreted steps replayed
    for t, named in (("pre", "org/task:1"), ("own", "debian:bookworm"), ("bare", "org/only-an-image:1")):
        p = plans[(t, "pull")]
        assert (p.named, p.pull_first, p.build, p.replay) == (named, True, False, True)
    # pull-or-build: the prebuilt image first, else build; a task whose image is its Dockerfile is built
    p = plans[("pre", "pull-or-build")]
    assert (p.pull_first, p.build, p.replay) == (True, True, False)
    for key in (("own", "pull-or-build"), ("own", "build"), ("pre", "build")):
        p = plans[key]
        assert (p.pull_first, p.build, p.replay) == (False, True, False), key
    # nothing to build: the named image under every policy
    assert all(not plans[("bare", p)].build for p in ("build", "pull-or-build"))
    with pytest.raises(ConfigError, match="'fetch' for 'sandbox.image_policy'"):
        plan_image(bare, "fetch")


@pytest.mark.parametrize("override, field", [
    ("sandbox.image_policy=fetch", "sandbox.image_policy"),
    ("sandbox.image_policy=Build", "sandbox.image_policy"),
])
def test_bad_image_policy_is_a_config_error_naming_field_and_value(override: str, field: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config([override])
    assert field in str(e.value) and override.split("=", 1)[1] in str(e.value)


@pytest.mark.parametrize("value", ["https://registry.example.com", "", "reg.example.com/a:tag", "a b", "r/x@sha"])
def test_bad_build_registry_is_a_config_error_naming_field_and_value(value: str) -> None:
    from farm.sandbox.kubernetes.sandbox import BACKEND

    cfg = load_config(["sandbox=kubernetes", f"sandbox.kubernetes.build_registry='{value}'"])
    assert cfg.sandbox.kubernetes.build_registry == value
    with pytest.raises(ConfigError) as e:
        BACKEND.check_environment(cfg.sandbox)
    assert "sandbox.kubernetes.build_registry" in str(e.value) and repr(value) in str(e.value)
    assert registry_prefix("registry.example.com:5000/farm/") == "registry.example.com:5000/farm"


# --- the local backend never drops build steps ----------------------------------------------


def test_local_builds_a_prebuilt_image_task_from_its_dockerfile(tmp_path: Path) -> None:
    task = harbor_task(tmp_path, "FROM python:3.13-slim-bookworm\nWORKDIR /app\nCOPY setup.sh ./\n"
                       "RUN bash /app/setup.sh\nENV GREETING=hi\nWORKDIR /app/site\n",
                       docker_image="alexgshaw/fix-git:20251031", files={"setup.sh": "mkdir -p /app/site\n"})
    assert task.environment.build_steps == ()  # the loader leaves them to the prebuilt image
    plan = plan_local(task)
    assert plan.task.environment.image == "python:3.13-slim-bookworm"
    assert [s.text for s in plan.steps if s.kind == "run"] == ["RUN bash /app/setup.sh"]
    assert plan.task.workdir == "/app/site" and plan.steps[-1].path == "/app/site"
    assert (plan.provenance.source, plan.provenance.unfaithful) == ("host", False)


def test_local_refuses_a_prebuilt_image_task_naming_the_base_and_the_instruction(tmp_path: Path) -> None:
    special = harbor_task(tmp_path, "FROM ghcr.io/org/toolchain:7\nRUN make\n", docker_image="org/t:1", name="a")
    with pytest.raises(UnsupportedTaskError) as e:
        plan_local(special)
    assert e.value.reason == "image_refused"
    assert "org/t:1" in str(e.value) and "FROM ghcr.io/org/toolchain:7" in str(e.value)
    # allow_any_image runs it on the host, with the steps, and marks the row
    plan = plan_local(special, allow_any_image=True)
    assert [s.text for s in plan.steps] == ["RUN make"]
    assert (plan.provenance.source, plan.provenance.unfaithful) == ("host", True)

    staged = harbor_task(tmp_path, "FROM debian:bookworm AS b\nRUN make\nFROM debian:bookworm\n"
                         "COPY --from=b /out /app/out\n", docker_image="org/t:2", name="b")
    with pytest.raises(UnsupportedTaskError) as e:
        plan_local(staged, allow_any_image=True)
    assert e.value.reason == "dockerfile_instruction"
    assert "COPY --from=b" in str(e.value) and "line 4" in str(e.value)


def test_offline_builds_never_pull_their_base() -> None:
    from farm.sandbox.images.engine import pull_flag

    assert pull_flag("podman", "never") == "--pull=never"
    assert pull_flag("podman", "missing") == pull_flag("podman", "always") == "--pull=missing"
    assert pull_flag("docker", "missing") == "--pull=false"  # docker's --pull is a boolean
