#!/bin/bash
# Reference solution: find the lost commit in the reflog and cherry-pick it onto main.
set -euo pipefail
cd /app/recipes
lost=$(git log -g --format='%H %s' HEAD | awk '$0 ~ / Add tomato soup recipe$/ {print $1; exit}')
test -n "$lost"
git checkout -q main
git cherry-pick "$lost"
