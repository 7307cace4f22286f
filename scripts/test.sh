#!/usr/bin/env bash
# Sets up (idempotently), runs the gates (mypy, ruff) and the whole test suite: fast unit tests first,
# then the integration tests (root: real runc, cgroups, mounts, registry) and
# the shared pymesos and mesos-go acceptance checks, then the project's own
# client-compatibility suite (tests/compat), then the seeded chaos run (a fixed
# seed list, a few minutes; see README, Chaos).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The gates first: strict types on src/ and the lint of src/ and tests/ (pyproject.toml).
.venv/bin/mypy
.venv/bin/ruff check src tests
.venv/bin/python -m pytest tests/unit -q -p no:cacheprovider "$@"
.venv/bin/python -m pytest tests/integration tests/acceptance -q -p no:cacheprovider "$@"
.venv/bin/python -m pytest tests/compat -q -p no:cacheprovider "$@"
.venv/bin/python -m pytest tests/chaos -q -p no:cacheprovider "$@"
