#!/bin/bash
# Hidden verifier: inspect the repository's branches, history and working tree.
mkdir -p /logs/verifier
timeout 60 python3 /tests/check.py
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
