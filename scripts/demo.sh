#!/usr/bin/env bash
# The main job: set up (idempotently), then run a local cluster with an example
# command task and pod, printing progress as it goes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/hello_pod.py "$@"
