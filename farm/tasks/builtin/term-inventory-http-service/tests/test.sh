#!/bin/bash
# Hidden verifier: talk to the service the agent left running on 127.0.0.1:8642.
mkdir -p /logs/verifier
timeout 90 python3 /tests/check.py
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
