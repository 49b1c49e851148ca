import pytest

# the shared suite lives outside test_*.py files: give it pytest's assertion messages too
pytest.register_assert_rewrite(f"{__name__}.conformance")
