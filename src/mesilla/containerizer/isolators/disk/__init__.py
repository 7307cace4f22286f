"""Disk isolators (disk/du)."""
