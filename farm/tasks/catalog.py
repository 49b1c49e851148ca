"""The four benchmarks at the exact revisions the vendor measured: the pinned sources.

Each source is a git URL, a full commit SHA and a subpath, with the rules its tasks load by
(defaults for fields task.toml leaves out, image lock, success marker, patch requirement); the
revisions are the ones the vendor's published scores were measured on (docs/benchmarks.md,
"Loading tasks"). Fetching a source is farm/tasks/fetch.py; loading its tasks
farm/tasks/benchmark.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from farm.config.benchmarks import ALIASES, source_key
from farm.errors import ConfigError
from farm.tasks.harbor import HarborDefaults
from farm.tasks.model import NetworkMode, Source


@dataclass(frozen=True)
class BenchmarkSource:
    name: str
    display_name: str
    url: str
    revision: str  # full 40-hex commit SHA
    subpath: str
    loader: str  # harbor | patcheval
    expected_tasks: int  # the denominator of every score on this benchmark
    pod_prefix: str
    agent_network: NetworkMode = "no-network"
    verifier_network: NetworkMode = "no-network"
    success_marker: str | None = None
    git_filter: str | None = "blob:none"
    strip_canary: bool = False
    require_git_patch: bool = True
    default_image_registry: str | None = None
    image_lock: str | None = None  # packaged digest lock applied by default
    file: str | None = None  # patcheval: the JSON file inside subpath

    @property
    def source(self) -> Source:
        return Source(url=self.url, revision=self.revision, subpath=self.subpath)

    def harbor_defaults(self) -> HarborDefaults:
        # the vendor loader's defaults for fields task.toml leaves out (farm/tasks/harbor.py)
        return HarborDefaults(
            workdir="/app", agent_timeout_s=3600.0, verifier_timeout_s=600.0,
            network=self.agent_network, cpus=0.5, memory_mb=8192, storage_mb=20480,
            success_marker=self.success_marker, require_git_patch=self.require_git_patch,
            strip_canary=self.strip_canary,
        )


_HARBOR_DATASETS = "https://github.com/laude-institute/harbor-datasets.git"

SOURCES: dict[str, BenchmarkSource] = {
    s.name: s
    for s in (
        BenchmarkSource(
            name="swebench_verified", display_name="SWE-bench Verified", url=_HARBOR_DATASETS,
            revision="86723674f04e4209ac479d0fb75d9d9f44b4377e", subpath="datasets/swebench-verified",
            loader="harbor", expected_tasks=500, pod_prefix="sweb-v",
            agent_network="public", verifier_network="public",
            success_marker="SWEBench results ends here", image_lock="sweb-v-20260904",
        ),
        BenchmarkSource(
            name="swebench_pro", display_name="SWE-bench Pro", url=_HARBOR_DATASETS,
            revision="c8e8f3fac7097accaacf261d74c3d6f441de45b1", subpath="datasets/swebenchpro",
            loader="harbor", expected_tasks=731, pod_prefix="sweb-p",
            agent_network="public", verifier_network="public",
        ),
        BenchmarkSource(
            name="terminal_bench_2_verified", display_name="Terminal-Bench 2.0 Verified",
            url="https://huggingface.co/datasets/zai-org/terminal-bench-2-verified.git",
            revision="7bbd2fef45db2f9ee9d9e3aae8f7253f56bf4e2b", subpath=".",
            loader="harbor", expected_tasks=89, pod_prefix="t-bench-2",
            agent_network="public", verifier_network="public",
            # the Hugging Face git server cannot serve lazily fetched blobs
            git_filter=None, strip_canary=True, require_git_patch=False,
        ),
        BenchmarkSource(
            name="patch_eval_verified", display_name="PatchEval Verified",
            url="https://github.com/bytedance/PatchEval.git",
            revision="b43285cdde80cc04608d5f1178a330b740c91c2d", subpath="patcheval/datasets",
            loader="patcheval", expected_tasks=230, pod_prefix="patch-eval-verified",
            agent_network="no-network", verifier_network="no-network",
            file="patcheval_verified.json",
        ),
    )
}
def get_source(name: str) -> BenchmarkSource:
    key = source_key(name) or name
    if key not in SOURCES:
        raise ConfigError(f"benchmark: unknown value {name!r}; available: {sorted(SOURCES)} "
                          f"(also spelled with '-'; aliases {sorted(ALIASES)})")
    return SOURCES[key]
