"""Which tests form the in-process tier (``make test-unit``, marker ``unit``).

A unit test starts no sandbox, no process and no server, and needs nothing from the machine
beyond this Python: the tier runs in about a minute with no bubblewrap, podman or root.
tests/conftest.py marks every collected test that passes :func:`is_unit`.

The module list was measured (docs/testing.md): every test not excluded by a marker below was
run with bwrap and podman hidden, recording each test that started a process or listened on a
socket; the modules holding one are listed here, each with what it starts.
"""

from __future__ import annotations

import pytest

# markers that say a test needs more than this process
HEAVY_MARKERS = ("integration", "slow", "bwrap", "root", "engine", "tools", "serve_stack")

# fixtures that start a sandbox or a server
HEAVY_FIXTURES = frozenset({
    "sandbox",  # tests/agent/conftest.py: a LocalSandbox (bubblewrap)
    "policy",  # tests/agent/conftest.py: policy endpoints over HTTP
    "demo_runs",  # tests/report/conftest.py: two real runs in bubblewrap sandboxes
    "s3_endpoint", "s3_bucket",  # tests/conftest.py: a moto S3 server process
    "tiny_server", "tiny_model_dir",  # tests/serve/conftest.py: a serving process and its model
    "podman_env",  # tests/conftest.py (tests/support/podman.py): podman as root
})

# test modules (by file name, so that moving one between folders keeps it classified) that
# start processes, sandboxes or servers without a marker or fixture above saying so
PROCESS_MODULES = {
    "test_budgets.py": "farm validate on local sandboxes (bubblewrap)",
    "test_ctime_scan.py": "the pod's system-change listing run by a real shell and Python",
    "test_engine_remove.py": "a scripted container engine (a bash script) as the engine binary",
    "test_official_harness_parts.py": "a Python child as the command bench/official_harness.py times",
    "test_frognano_vs_gemma.py": "farm validate on local sandboxes (bubblewrap)",
    "test_execution.py": "tool calls in a LocalSandbox",
    "test_leaf_differential.py": "the sandbox agent and the vendor's tools as processes",
    "test_leaf_tools.py": "real commands through the sandbox agent's runner",
    "test_leaf_environment.py": "the vendor tools' shell through the sandbox agent's runner",
    "test_leaf_bash_processes.py": "the vendor tools' shell through the sandbox agent's runner",
    "test_leaf_tools_rules.py": "real commands through the sandbox agent's runner",
    "test_loop.py": "the agent loop on a LocalSandbox",
    "test_loop_accounting.py": "the agent loop on a LocalSandbox",
    "test_parallel.py": "parallel tool calls on a LocalSandbox",
    "test_policies.py": "policies through the loop on a LocalSandbox",
    "test_unstorable_text.py": "a LocalSandbox",
    "test_standin_images.py": "scripts/standin_images.py",
    "test_verifier_cache.py": "pip/uv builds of the verifier cache",
    "test_atif.py": "Harbor's own reader; real runs (demo_runs)",
    "test_diff.py": "real runs (demo_runs)",
    "test_report_render.py": "jobs/report.py as a process",
    "test_sinks.py": "farm run with a sink",
    "test_viewer.py": "farm view serving on loopback",
    "test_end_to_end.py": "whole runs in bubblewrap sandboxes",
    "test_fanout.py": "bench/fanout.py",
    "test_gc_validate_cli.py": "farm gc/validate on local sandboxes",
    "test_resilience.py": "runs in bubblewrap sandboxes",
    "test_channel.py": "the sandbox agent over real pipes",
    "test_images_check.py": "image checks through an engine",
    "test_engine_preflight.py": "a fake container engine (a shell script), podman info",
    "test_run_sigterm.py": "farm run as a process, bubblewrap sandboxes and podman containers",
    "test_images_lock.py": "competing build processes",
    "test_inside_kill.py": "the sandbox agent's process kills",
    "test_inside_procs.py": "real process trees and timeouts",
    "test_inside_server.py": "commands through the sandbox agent",
    "test_registry.py": "a fresh interpreter to check imports",
    "test_app.py": "farm serve as a process, fake OpenAI servers",
    "test_dockerfile.py": "git and shell steps",
    "test_loading.py": "farm validate/run on local sandboxes",
    "test_patcheval.py": "git",
    "test_source_mirrors.py": "git mirrors",
    "test_sources.py": "git",
    "test_pro_grade.py": "SWE-bench Pro instances' parser.py as a process",
    "test_pro_scripts.py": "git (a scripts copy read from a bare repository)",
    "test_pro_recipes.py": "git (the census's repository mirror)",
    "test_pro_verifier.py": "test.sh, run_script.sh, parser.py and git on a repository the test makes",
    "test_swebench_pro_side.py": "git: mirrors, submodules and clones the test makes",
}


def is_unit(item: pytest.Item) -> bool:
    """True for a test that runs in this process only (see the module docstring)."""
    if any(item.get_closest_marker(name) is not None for name in HEAVY_MARKERS):
        return False
    if HEAVY_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return False
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("store_uri") == "s3":
        return False  # the S3 instance of tests/conftest.py's store_uri starts moto
    return item.path.name not in PROCESS_MODULES
