#!/bin/bash
# Hidden verifier: regenerate the inbox, derive the expected library, compare.
mkdir -p /logs/verifier
timeout 60 python3 /tests/check.py
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
