from __future__ import annotations

from pathlib import Path

import pytest

from farm.config import apply_overrides, config_hash, load_config, resolved_agent
from farm.errors import ConfigError


def test_embedded_defaults_run_the_builtin_suite_with_the_oracle():
    cfg = load_config([])
    assert cfg.benchmark.name == "builtin"
    assert cfg.sandbox.backend == "local"
    assert resolved_agent(cfg) == "oracle"
    assert cfg.store.uri == "./farm-results"


def test_a_model_preset_without_an_endpoint_is_refused_not_run_as_the_oracle():
    from farm.config import require_endpoint

    for overrides in (["model=frognano-4b"], ["model=endpoint"], ["model=qwen3.5-4b", "agent.name=auto"]):
        cfg = load_config(overrides)  # loads: `farm serve` uses the same presets without an endpoint
        with pytest.raises(ConfigError, match=r"has no endpoint: pass model.base_url=.* or serve.enabled=true"):
            require_endpoint(cfg)
    for ok in (["model=frognano-4b", "serve.enabled=true"], ["model=frognano-4b", "model.base_url=http://h/v1"],
               ["model=frognano-4b", "agent=nop"], []):
        require_endpoint(load_config(ok))
    with pytest.raises(ConfigError, match="has no endpoint"):
        load_config(["agent=leaf"])


def test_base_url_switches_auto_agent_to_the_leaf_loop():
    cfg = load_config(["model.base_url=http://127.0.0.1:9/v1"])
    assert resolved_agent(cfg) == "leaf"


def test_group_selection_and_dotted_overrides_merge():
    cfg = load_config(["benchmark=builtin", "agent=nop", "run.seeds=3", "store.uri=./out",
                       "model.extra_body.top_k=20"])
    assert (cfg.agent.name, cfg.run.seeds, cfg.store.uri) == ("nop", 3, "./out")
    assert cfg.model.extra_body == {"top_k": 20}


@pytest.mark.parametrize(
    "override, needle",
    [
        ("run.nope=1", "'run.nope'"),
        ("run.seeds=three", "'three'"),
        ("run.seeds=0", "'run.seeds'"),
        ("agent.tool_execution=parallel", "'parallel'"),
        ("benchmark=does-not-exist", "'does-not-exist'"),
        ("grade.mode=later", "'grade.mode'"),
        ("nonsense", "key=value"),
    ],
)
def test_bad_overrides_name_the_key_and_the_value(override, needle):
    with pytest.raises(ConfigError) as info:
        load_config([override])
    assert needle in str(info.value)


def test_config_file_errors_name_the_file(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run: {seeds: [1, 2\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_config([], config_file=bad)
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("run:\n  sedes: 3\n")
    with pytest.raises(ConfigError, match="sedes"):
        load_config([], config_file=unknown)


def test_hash_ignores_execution_settings_but_not_measured_ones():
    a = load_config([])
    assert config_hash(a) == config_hash(load_config(["run.max_in_flight=99", "store.uri=/elsewhere"]))
    assert config_hash(a) != config_hash(load_config(["agent.max_steps=10"]))


def test_arm_overrides_apply_on_top_and_are_validated():
    cfg = load_config([])
    arm = apply_overrides(cfg, ["model.parallel_tool_calls=false", "agent.tool_execution=concurrent"])
    assert (arm.model.parallel_tool_calls, arm.agent.tool_execution) == (False, "concurrent")
    with pytest.raises(ConfigError, match="tool_execution"):
        apply_overrides(cfg, ["agent.tool_execution=sideways"])


def test_leaf_without_endpoint_is_refused():
    with pytest.raises(ConfigError, match="model.base_url"):
        load_config(["agent=leaf"])


def test_backend_sections_are_validated_at_load_time():
    cfg = load_config(["sandbox=kubernetes"])
    assert cfg.sandbox.backend == "kubernetes" and cfg.sandbox.kubernetes.namespace == "farm-sandboxes"
    with pytest.raises(ConfigError, match="namespaec"):
        load_config(["sandbox=kubernetes", "sandbox.kubernetes.namespaec=x"])


def test_experiment_presets_load():
    for name in ("demo", "ablate-parallel-tools", "reproduce-frognano"):
        cfg = load_config([f"experiment={name}", "model.base_url=http://127.0.0.1:9/v1"])
        assert cfg.experiment.arms, name
    repro = load_config(["experiment=reproduce-frognano", "model.base_url=http://127.0.0.1:9/v1"])
    assert len(repro.experiment.benchmarks) == 4 and repro.run.seeds == 3


def test_conf_farm_yaml_mirrors_the_embedded_defaults():
    """conf/farm.yaml is documentation of the defaults; it must not silently change them."""
    from omegaconf import OmegaConf

    from farm.config import FarmConfig, conf_dir, to_dict

    on_disk = OmegaConf.to_container(OmegaConf.load(conf_dir() / "farm.yaml"))
    assert on_disk == to_dict(FarmConfig())


@pytest.mark.parametrize("override,key", [
    ("sandbox.docker.pull=sometimes", "sandbox.docker.pull"),
    ("sandbox.docker.enigne=podman", "sandbox.docker.enigne"),
    ("sandbox.docker.max_reconnects=-1", "sandbox.docker.max_reconnects"),
    ("sandbox.docker.cpu_limit_factor=0.5", "sandbox.docker.cpu_limit_factor"),
    ("sandbox.docker.start_timeout_s=0", "sandbox.docker.start_timeout_s"),
    ("sandbox.kubernetes.capabilities=all", "sandbox.kubernetes.capabilities"),
    ("sandbox.kubernetes.agent_network=sometimes", "sandbox.kubernetes.agent_network"),
    ("sandbox.kubernetes.pod_start_timeout_s=soon", "sandbox.kubernetes.pod_start_timeout_s"),
    ("sandbox.kubernetes.pod_lifetime_s=0", "sandbox.kubernetes.pod_lifetime_s"),
    ("sandbox.kubernetes.namespace=", "sandbox.kubernetes.namespace"),
    ("sandbox.kubernetes.pull_timeout_s=0", "sandbox.kubernetes.pull_timeout_s"),
    ("sandbox.kubernetes.keepalive_s=-5", "sandbox.kubernetes.keepalive_s"),
    ("sandbox.kubernetes.reconnect_window_s=0", "sandbox.kubernetes.reconnect_window_s"),
])
def test_every_backend_section_is_validated_whichever_backend_is_chosen(override: str, key: str):
    value = override.split("=", 1)[1]
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as e:
        load_config([override])  # sandbox.backend is local: the other sections are still checked
    assert repr(value) in str(e.value) or value in str(e.value)


def test_backend_sections_are_typed():
    cfg = load_config(["sandbox=docker", "sandbox.docker.engine=podman",
                       "sandbox.docker.extra_args=[--log-level,debug]",
                       "sandbox.kubernetes.node_selector={pool: sandbox}", "sandbox.kubernetes.cpu_limit_factor=null"])
    assert cfg.sandbox.docker.engine == "podman" and cfg.sandbox.docker.extra_args == ["--log-level", "debug"]
    assert cfg.sandbox.kubernetes.node_selector == {"pool": "sandbox"}
    assert cfg.sandbox.kubernetes.cpu_limit_factor is None


def test_only_the_chosen_backend_section_enters_the_config_hash():
    local = config_hash(load_config([]))
    assert local == config_hash(load_config(["sandbox.kubernetes.namespace=elsewhere", "sandbox.docker.pull=always"]))
    assert local != config_hash(load_config(["sandbox.local.allow_any_image=true"]))
    kube = config_hash(load_config(["sandbox=kubernetes"]))
    assert kube != config_hash(load_config(["sandbox=kubernetes", "sandbox.kubernetes.runtime_class=gvisor"]))
