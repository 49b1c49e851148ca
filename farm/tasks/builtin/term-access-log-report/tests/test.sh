#!/bin/bash
# Hidden verifier: compare /app/report.txt with the report recomputed from /tests/access.log.
mkdir -p /logs/verifier
timeout 60 python3 /tests/check.py
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
