"""Linux-specific isolators (linux/capabilities)."""
