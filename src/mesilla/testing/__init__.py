"""Helpers for tests and benchmarks that run real Mesilla daemons and real parts."""
