#!/bin/bash
# Hidden verifier: history, tree state and behaviour after the merge.
mkdir -p /logs/verifier
timeout 90 python3 /tests/check.py
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
