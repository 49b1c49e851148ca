"""What the emulator checks in every object it receives, and the 422 Status it answers with.

The schema is the official Kubernetes OpenAPI schema as kubernetes-validate ships it offline
(strict: unknown fields are refused too). On top of the schema, the checks the API server does
in code that matter for farm's objects: DNS-1123 names, label keys and values, and a body
namespace that matches the URL's.

A real API server answers a JSON type mismatch (a string ``runAsUser``) with 400 BadRequest
from its decoder and semantic errors with 422 Invalid; the emulator answers 422 Invalid with
the field in ``details.causes`` for every schema failure, so a test sees one refusal shape and
the field it names.
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate

from .store import RESOURCES, ApiError

SCHEMA_VERSION = "1.37.0"  # the Kubernetes API version objects are validated against

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

_CAUSE = {"required": "FieldValueRequired", "enum": "FieldValueNotSupported",
          "additionalProperties": "FieldValueInvalid", "type": "FieldValueInvalid"}


def _field(path: list[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def invalid(kind: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid as the API server words it: ``Pod "x" is invalid: field: message``."""
    text = ", ".join(f"{f}: {msg}" for _, f, msg in causes)
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {text}',
                    {"name": name, "kind": kind,
                     "causes": [{"reason": r, "message": msg, "field": f} for r, f, msg in causes]})


def validate(resource: str, namespace: str, body: Any) -> None:
    """Raise ApiError (400 or 422) unless ``body`` is an object the API server would store."""
    api_version, kind, _ = RESOURCES[resource]
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", f"the body of the request was not a JSON object: {type(body).__name__}")
    if body.get("kind", kind) != kind or body.get("apiVersion", api_version) != api_version:
        raise ApiError(400, "BadRequest", f"the API version in the data ({body.get('apiVersion')}) and kind "
                       f"({body.get('kind')}) do not match {api_version} {kind} of the request URL")
    meta = body.get("metadata")
    name = meta.get("name", "") if isinstance(meta, dict) else ""
    full = {"apiVersion": api_version, "kind": kind, **body}
    try:
        kubernetes_validate.validate(full, SCHEMA_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        where = _field(list(e.path)) or "<root>"
        reason = _CAUSE.get(str(e.validator), "FieldValueInvalid")
        raise invalid(kind, name, [(reason, where, f"Invalid value: {e.message}")]) from None
    causes: list[tuple[str, str, str]] = []
    if not name:
        causes.append(("FieldValueRequired", "metadata.name", "Required value: name or generateName is required"))
    elif len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        causes.append(("FieldValueInvalid", "metadata.name",
                       f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of lower case "
                       "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"))
    if namespace and meta.get("namespace") not in (None, namespace):
        raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the namespace "
                       f"sent on the request ({meta.get('namespace')!r} != {namespace!r})")
    for k, v in (meta.get("labels") or {}).items():
        prefix, _, label = k.rpartition("/")
        bad_prefix = bool(prefix) and not _DNS1123_SUBDOMAIN.match(prefix)
        if not label or len(label) > 63 or not _LABEL_NAME.match(label) or bad_prefix:
            causes.append(("FieldValueInvalid", "metadata.labels", f"Invalid value: {k!r}: not a valid label key"))
        if not isinstance(v, str) or len(v) > 63 or not _LABEL_VALUE.match(v):
            causes.append(("FieldValueInvalid", "metadata.labels",
                           f"Invalid value: {v!r}: a valid label must be an empty string or consist of alphanumeric "
                           "characters, '-', '_' or '.', and must start and end with an alphanumeric character "
                           "(at most 63 characters)"))
    if causes:
        raise invalid(kind, name, causes)
