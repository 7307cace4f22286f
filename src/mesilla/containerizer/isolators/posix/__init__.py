"""Usage-only isolators for plain processes (Mesos posix/*), plus posix/rlimits."""
