from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tasks import CHECK_ANSWER, make_task_dir


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    make_task_dir(root, "write-answer", CHECK_ANSWER)
    make_task_dir(root, "no-reward", "#!/bin/bash\necho 'tests ran but wrote nothing'\n")
    return root
