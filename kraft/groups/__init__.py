"""The client side of consumer groups over the Kafka protocol: a group member, the group
admin, the consumer protocol's assignors, and what group operations answer."""
