"""Read farm's ATIF export with Harbor's own reader (run under a Python that has harbor).

For every JSON document in the directory given: Harbor's pydantic model accepts it, writes it
back unchanged, and Harbor's trajectory validator passes it. Prints one JSON summary line.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path

from harbor.models.trajectories import Trajectory
from harbor.utils.trajectory_validator import TrajectoryValidator


def main(directory: str) -> None:
    failures = []
    paths = sorted(p for p in Path(directory).glob("*.json"))
    for path in paths:
        raw = json.loads(path.read_text())
        validator = TrajectoryValidator()
        if not validator.validate(str(path)):
            failures.append(f"{path.name}: {validator.get_errors()[:3]}")
        elif Trajectory.model_validate(raw).to_json_dict() != raw:
            failures.append(f"{path.name}: Harbor's model does not write the document back unchanged")
    print(json.dumps({"harbor": importlib.metadata.version("harbor"), "read": len(paths), "failures": failures}))


if __name__ == "__main__":
    main(sys.argv[1])
