"""``grade.*`` of the farm config: how trials are graded (farm/grade/attempt.py and the verifiers beside it).

Kept apart from farm/config/schema.py (farm.config re-exports it) so that the schema module
stays small; the schema is still one tree (FarmConfig.grade).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class VerifierCacheConfig:
    """``grade.verifier_cache``: tools graders fetch at verify time, pre-staged (farm/grade/verifier_cache.py)."""

    dir: str | None = None  # a directory made by `make verifier-cache`; null: graders fetch their own
    offline: bool = True  # tell uv/pip to use only the cache (a cluster without internet)


@dataclass
class GradeConfig:
    # in_place | fresh | both (in place, then fresh as a tamper check) | patch_both (both for a
    # task whose answer is its git patch, in place for one whose answer is container state)
    mode: str = "in_place"
    verifier_cache: VerifierCacheConfig = field(default_factory=VerifierCacheConfig)
    # a verifier that could not set itself up (infra_error:verifier_setup) is re-run this many
    # times on the captured patch, without a second agent run
    verifier_retries: int = 1
    # kill what the agent left running before an in-place verifier (a daemon could write the
    # reward); null: only for patch-graded tasks, since a Terminal-Bench answer may be a server
    # the agent left running for the tests to query
    kill_leftovers: bool | None = None
    # a trial that dual grading marks tamper_suspect (resolved in place, not from its patch) is
    # recorded unresolved, not only left out of the clean score (the strict twin's setting)
    tamper_fails: bool = False
