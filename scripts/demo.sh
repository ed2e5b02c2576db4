#!/usr/bin/env bash
# The main job on a new machine with no paid setup: install, start the test bed, and run the bundled
# demo benchmark through the whole pipeline with the stub engine and the local meter (spends nothing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash testbed/testbed.sh install
bash scripts/install.sh
eval "$(bash testbed/testbed.sh up)"
root=${1:-"$PWD/.work/demo-$(date +%s)"}
mkdir -p "$(dirname "$root")"
exec .venv/bin/cowork-adapter demo --run-root "$root" --docker-host "$DOCKER_HOST" --scenario "${SCENARIO:-all}"
