"""Namespace isolators: `namespaces/pid` and `namespaces/ipc`."""
