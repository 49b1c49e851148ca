"""Project-specific errors that are also builtin-compatible.

Catching ``ValueError`` still catches a bad config; catching ``FarmError`` catches
everything farm raises on purpose. Each error names the field/file and the value.
"""

from __future__ import annotations


class FarmError(Exception):
    """Base of every error farm raises deliberately."""


class ConfigError(FarmError, ValueError):
    """Invalid configuration: names the key and the offending value."""


class TaskFormatError(FarmError, ValueError):
    """A task directory or dataset row is malformed: names the file and the problem."""

    def __init__(self, path: object, message: str) -> None:
        self.path = str(path)
        super().__init__(f"{path}: {message}")


class UnsupportedTaskError(FarmError, RuntimeError):
    """The task is well-formed but this backend cannot run it (e.g. it needs an image's contents).

    ``reason`` is a short machine-readable cause; the trial row records it as
    ``error_class = "task_unsupported:<reason>"`` (e.g. ``image_refused``, ``no_image``,
    ``dockerfile_instruction``, ``image_lock``). Deterministic: never retried.
    """

    def __init__(self, message: str, reason: str = "unsupported") -> None:
        super().__init__(message)
        self.reason = reason


class StoreError(FarmError, RuntimeError):
    """The result store could not be read or written."""


class StoreWriteError(StoreError):
    """A write to the result store failed for good: S3 still failing when ``store.retry_budget_s``
    ran out, or a local store that cannot take the bytes (a full disk). The run stops; what was
    committed before stays readable, nothing half-written is visible. ``farm run`` exits with 6."""

    exit_code = 6
