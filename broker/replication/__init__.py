"""Partition replication: the pure leader/follower rules (``partition_state``), sans-IO."""
