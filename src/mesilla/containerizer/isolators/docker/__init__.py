"""Isolators for docker images (docker/runtime)."""
