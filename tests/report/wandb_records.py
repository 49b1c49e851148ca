"""Read the records of an offline W&B run file (``run-<id>.wandb``) for tests.

The file is a 7-byte header (``:W&B``, magic 0xBEE1, version 0) and then a LevelDB-style log:
32 KiB blocks of chunks, each chunk a 7-byte header (CRC32, little-endian length, type: 1 full,
2 first, 3 middle, 4 last) and its bytes; a block tail shorter than a chunk header is padding.
Each record is a ``wandb.proto.wandb_internal_pb2.Record`` (wandb's own protobuf message).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
BLOCK = 32768
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:len(HEADER)] == HEADER, f"{path}: not a W&B run file (header {data[:7]!r})"
    pos, out, parts = len(HEADER), [], b""
    while pos + CHUNK_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEADER:
            pos += left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + CHUNK_HEADER])
        if kind == 0 and length == 0:  # zero padding at the end of a block
            pos += left
            continue
        chunk = data[pos + CHUNK_HEADER:pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        assert kind in (FULL, FIRST, MIDDLE, LAST), f"{path}: bad chunk type {kind} at {pos}"
        parts = chunk if kind in (FULL, FIRST) else parts + chunk
        if kind in (FULL, LAST):
            rec = pb.Record()
            rec.ParseFromString(parts)
            out.append(rec)
    return out


def summary_and_config(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's summary metrics and config, as the records set them (later updates win)."""
    summary: dict[str, Any] = {}
    config: dict[str, Any] = {}
    for rec in records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "summary":
            for item in rec.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind in ("config", "run"):
            cfg = rec.config if kind == "config" else rec.run.config
            for item in cfg.update:
                config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return summary, config
