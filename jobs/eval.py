"""`ray job submit` entry point: run an evaluation on the cluster this job runs in.

    ray job submit --address http://127.0.0.1:8265 --working-dir . \
        --runtime-env jobs/runtime_env.yaml -- python jobs/eval.py experiment=demo

Arguments are farm config overrides, exactly as for `farm run`. The job's driver joins the
cluster (Ray sets RAY_ADDRESS for job drivers), so trials fan out over the cluster's workers.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The working directory Ray uploads is the repository: make `farm` importable from it even
# when the cluster's Python does not have farm installed.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from farm.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["run", "--quiet", *sys.argv[1:]]))
