"""Network isolators: `network/cni` (containers on CNI networks)."""
