"""The client side of transactions' administration over the Kafka protocol: what Kafka's
AdminClient and ``kafka-transactions.sh`` (KIP-664) do, for the REST admin API of any node."""
