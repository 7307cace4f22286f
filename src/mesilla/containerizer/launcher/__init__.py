"""Launchers: how a container's first process is created (`--launcher`)."""
