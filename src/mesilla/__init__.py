"""Mesilla: the Apache Mesos pod stack (master, agent, containerizer, executors) in Python."""

__version__ = "0.1.0"

# The Mesos release whose v1 HTTP APIs Mesilla speaks; `/version` reports it,
# since clients such as pymesos compare it against the features they use.
MESOS_VERSION = "1.11.0"
