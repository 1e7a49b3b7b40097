"""Metadata records, the immutable cluster image, deltas and snapshots (next issues)."""
