"""Re-record atif-trajectory.schema.json from Harbor's own ATIF models.

Harbor needs Python >= 3.12 (farm's venv is 3.11), so run this with an interpreter that has it:
    python3.12 -m venv /tmp/harbor && /tmp/harbor/bin/pip install harbor==0.26.0
    /tmp/harbor/bin/python tests/report/data/record_atif_schema.py
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

from harbor.models.trajectories import Trajectory

OUT = Path(__file__).with_name("atif-trajectory.schema.json")


def main() -> None:
    version = importlib.metadata.version
    comment = (f"Recorded test vector: the JSON Schema of ATIF (Harbor RFC 0001) as harbor=={version('harbor')} "
               f"(PyPI) generates it with pydantic=={version('pydantic')}: "
               "harbor.models.trajectories.Trajectory.model_json_schema(). Regenerate with "
               "tests/report/data/record_atif_schema.py. The model validators (sequential step ids, "
               "source_call_id references, agent-only fields) are not expressible here and are "
               "checked by tests/report/test_atif.py.")
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$comment": comment,
              **Trajectory.model_json_schema()}
    OUT.write_text(json.dumps(schema, indent=1) + "\n")


if __name__ == "__main__":
    main()
