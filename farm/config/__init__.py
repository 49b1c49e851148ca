"""Structured configuration: the schema, loading from conf/ and overrides, validation, arms.

``from farm.config import X`` works for every name the rest of farm uses; the rooms are
schema.py (FarmConfig and its sections, with sandbox.py and grade.py), load.py (conf/, YAML,
overrides, config_hash), checks.py (allowed values, validate(), the endpoint rule; not named
validate.py, which the re-exported validate() would shadow), benchmarks.py (the
benchmark names) and arms.py (arms_of, per-benchmark budgets).

This package imports nothing of farm but farm.errors: everything else builds on it.
"""

from farm.config.checks import (
    AT_LEAST_ONE_IF_SET,
    CHOICES,
    NON_EMPTY,
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_IF_SET,
    REPORT_SINKS,
    require_endpoint,
    resolved_agent,
    validate,
)
from farm.config.grade import GradeConfig, VerifierCacheConfig
from farm.config.load import (
    NODE_GROUPS,
    NOT_HASHED,
    ROOT_GROUPS,
    apply_overrides,
    conf_dir,
    config_hash,
    load_config,
    to_dict,
    to_yaml,
)
from farm.config.sandbox import (
    CAPABILITY_PROFILES,
    DEFAULT_EGRESS_EXCEPT,
    DockerSandboxConfig,
    KubernetesSandboxConfig,
    LocalSandboxConfig,
    NullSandboxConfig,
    SandboxConfig,
)
from farm.config.schema import (
    ORACLE_MODEL,
    AgentConfig,
    ArmConfig,
    BenchmarkConfig,
    ExperimentConfig,
    FarmConfig,
    ModelConfig,
    ReportConfig,
    RunConfig,
    ServeConfig,
    ServingConfig,
    StoreConfig,
)

__all__ = [
    "AT_LEAST_ONE_IF_SET", "CAPABILITY_PROFILES", "CHOICES", "DEFAULT_EGRESS_EXCEPT", "NODE_GROUPS",
    "NON_EMPTY", "NON_NEGATIVE", "NOT_HASHED", "ORACLE_MODEL", "POSITIVE", "POSITIVE_IF_SET",
    "REPORT_SINKS", "ROOT_GROUPS",
    "AgentConfig", "ArmConfig", "BenchmarkConfig", "DockerSandboxConfig", "ExperimentConfig", "FarmConfig",
    "GradeConfig", "KubernetesSandboxConfig", "LocalSandboxConfig", "ModelConfig", "NullSandboxConfig",
    "ReportConfig", "RunConfig", "SandboxConfig", "ServeConfig", "ServingConfig", "StoreConfig",
    "VerifierCacheConfig",
    "apply_overrides", "conf_dir", "config_hash", "load_config", "require_endpoint", "resolved_agent",
    "to_dict", "to_yaml", "validate",
]
