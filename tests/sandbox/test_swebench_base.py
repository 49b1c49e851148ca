"""When a SWE-bench task's image is built, what happens to the instance image its Dockerfile starts
FROM (farm/sandbox/images/ensure.py ``build_bases``): a published image that is present is used as
it is; farm's own stand-in is re-checked against its recipe (never reused stale); an absent one is
pulled first only under pull-or-build; a failed stand-in build is not repeated in the process."""

from __future__ import annotations

import asyncio

import pytest

from farm.sandbox.base import SandboxStartError
from farm.sandbox.images import ensure
from farm.sandbox.images.plan import ImageFacts
from farm.sandbox.images.swebench import build as swebench_build
from farm.sandbox.images.swebench.recipe import RECIPE_LABEL
from farm.tasks.model import Environment, Task, VerifierSpec

ROW = {"instance_id": "o__calc-1", "repo": "o/calc", "version": "0.1", "base_commit": "a" * 40}
REF = "docker.io/swebench/sweb.eval.x86_64.o_1776_calc-1:latest"


def _task() -> Task:
    return Task(benchmark="swebench_verified", task_id="o__calc-1", instruction="", environment=Environment(),
                verifier=VerifierSpec(protocol="swebench"),
                metadata={"swebench": ROW, "swebench_repos": "/mirror", "swebench_pythons": None})


@pytest.fixture
def engine(monkeypatch):
    state = {"present": None, "built": [], "pulled": [], "fail": False}

    async def inspect(binary, ref):
        return state["present"] if ref == REF else None

    async def pulled(binary, ref, pull, *, remember):
        state["pulled"].append(ref)
        return "pull failed: no registry"

    async def build(binary, row, repos, **kw):
        state["built"].append((row["instance_id"], repos, kw.get("pythons")))
        if state["fail"]:
            raise SandboxStartError("layer failed", reason="image_build")
        return swebench_build.BuiltInstance(REF, "sha256:new", [REF], 1.0, "the build log")

    monkeypatch.setattr(ensure, "inspect_image", inspect)
    monkeypatch.setattr(ensure, "_present_or_pulled", pulled)
    monkeypatch.setattr(swebench_build, "ensure_instance", build)
    ensure.forget_failures()
    yield state
    ensure.forget_failures()


def test_a_present_published_image_is_used_as_it_is(engine) -> None:
    engine["present"] = ImageFacts("sha256:real", labels={})
    assert asyncio.run(ensure.build_bases("podman", _task(), "build")) == ""
    assert engine["built"] == [] and engine["pulled"] == []


def test_a_present_stand_in_is_rechecked_against_its_recipe(engine) -> None:
    engine["present"] = ImageFacts("sha256:old", labels={RECIPE_LABEL: "old-recipe", "io.farm.standin": "true"})
    assert asyncio.run(ensure.build_bases("podman", _task(), "pull-or-build")) == "the build log"
    assert engine["built"] == [("o__calc-1", "/mirror", None)]
    assert engine["pulled"] == []  # farm's own stand-in is never replaced by a pull attempt


def test_an_absent_image_is_pulled_first_only_under_pull_or_build(engine) -> None:
    asyncio.run(ensure.build_bases("podman", _task(), "pull-or-build"))
    assert engine["pulled"] == [REF] and len(engine["built"]) == 1
    asyncio.run(ensure.build_bases("podman", _task(), "build"))
    assert engine["pulled"] == [REF] and len(engine["built"]) == 2


def test_a_failed_stand_in_build_is_not_repeated(engine) -> None:
    engine["fail"] = True
    for _ in range(2):
        with pytest.raises(SandboxStartError, match="layer failed") as err:
            asyncio.run(ensure.build_bases("podman", _task(), "build"))
        assert err.value.reason == "image_build"
    assert len(engine["built"]) == 1


def test_tasks_without_a_swebench_row_have_no_base_to_build(engine) -> None:
    task = Task(benchmark="b", task_id="t", instruction="", environment=Environment(), verifier=VerifierSpec())
    assert asyncio.run(ensure.build_bases("podman", task, "build")) == ""
    assert engine["built"] == []
