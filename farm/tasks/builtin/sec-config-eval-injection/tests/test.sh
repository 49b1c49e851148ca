#!/bin/bash
# Hidden verifier: grade.py restores the hidden tests into the repo and runs
# FAIL_TO_PASS and PASS_TO_PASS; it writes /logs/verifier/reward.txt.
mkdir -p /logs/verifier
PYTHONDONTWRITEBYTECODE=1 timeout 90 python3 /tests/grade.py
if [ ! -s /logs/verifier/reward.txt ]; then
  echo "grader did not finish" >&2
  echo 0 > /logs/verifier/reward.txt
fi
