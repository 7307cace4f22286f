"""Isolators, one per module under `<family>/<name>.py`, selected by `--isolation`."""
