"""Kafka broker: server, handlers, partition logs, replication, groups (next issues)."""
