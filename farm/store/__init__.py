"""Result storage: Arrow schemas, the Parquet store (local or S3) and the batching writer."""

from farm.store.results import PLAN_SCHEMA, ResultStore, latest_attempts
from farm.store.schema import STEPS_SCHEMA, TRIALS_SCHEMA, StepRow, TrialResult
from farm.store.writer import BatchWriter

__all__ = [
    "BatchWriter", "PLAN_SCHEMA", "ResultStore", "STEPS_SCHEMA", "StepRow", "TRIALS_SCHEMA",
    "TrialResult", "latest_attempts",
]
