"""Volume isolators (volume/host_path, volume/sandbox_path): bind mounts into containers."""
