"""Chaos run options: `MESILLA_CHAOS_SEED` (or `--chaos-seed`) replaces the CI seed list
with one seed, `MESILLA_CHAOS_SECONDS` (`--chaos-seconds`) sets how long the load runs."""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--chaos-seed", type=int, default=None, help="run the chaos test with this seed only")
    parser.addoption("--chaos-seconds", type=float, default=None, help="seconds of load per chaos run")


def chaos_seeds(config: pytest.Config, default: list[int]) -> list[int]:
    seed = config.getoption("--chaos-seed", None) or os.environ.get("MESILLA_CHAOS_SEED")
    return [int(seed)] if seed is not None else default


def chaos_seconds(config: pytest.Config, default: float) -> float:
    seconds = config.getoption("--chaos-seconds", None) or os.environ.get("MESILLA_CHAOS_SECONDS")
    return float(seconds) if seconds is not None else default


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "chaos_seed" in metafunc.fixturenames:
        metafunc.parametrize("chaos_seed", chaos_seeds(metafunc.config, metafunc.module.SEEDS))
