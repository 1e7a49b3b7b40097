"""The Kafka client core: everything a client decides, and nothing it waits for (sans-I/O).

One implementation, shared by the asyncio shell (``broker/kafka_client.py``, used by brokers,
the REST API and the command line, and ``kraft/groups/client.py`` over it) and the blocking
shell of Spark's workers (``spark_source/_client_*``).  No module here opens a socket, starts a
thread, touches an event loop or reads a clock: bytes, responses, times and random numbers are
passed in as values, and decisions come back as values.

- :mod:`~kafka_protocol.client.connection`: one pipelined connection: correlation ids, the
  bytes to send, response frames matched to their requests, version negotiation (KIP-35/511).
- :mod:`~kafka_protocol.client.backoff`: the one retry backoff (``retry.backoff.ms`` doubling
  to ``retry.backoff.max.ms``, with jitter, KIP-580).
- :mod:`~kafka_protocol.client.error_policy`: the one table of what an error code asks of a
  client (refresh metadata, find the coordinator, retry, give up).
- :mod:`~kafka_protocol.client.metadata`: bootstrap and leader lookup, the metadata cache.
- :mod:`~kafka_protocol.client.cursor`: the fetch cursor (the next offset of a partition,
  advancing over fetched batches, OFFSET_OUT_OF_RANGE).
- :mod:`~kafka_protocol.client.requests`: the consumer's ListOffsets, OffsetCommit and Fetch
  requests, and readers of their answers.

The shells keep only what is theirs: sockets and buffers, waiting and deadlines (a blocking
shell reads the clock, an asyncio shell uses ``asyncio.timeout``), and turning outcomes into
their own exceptions.
"""
