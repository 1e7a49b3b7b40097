"""Metadata records, the immutable cluster image, deltas, snapshots and the local metadata log.

Pure modules (values in, values out)::

    records     framing of metadata records (frame version, record type, version, body),
                the record-type registry, metadata batches (RecordBatch v2)
    image       ClusterImage (Kafka's MetadataImage): topics, partitions, configs, brokers,
                features, offset and epoch; image.to_records() is a snapshot
    delta       MetadataDelta.replay(record) / apply() -> next image; local_changes(broker)
    configs     topic and broker config schema, validation, effective values (DescribeConfigs)

The one module that does file I/O::

    log         LocalMetadataLog: <metadata.log.dir>/__cluster_metadata-0/, fsynced appends,
                torn-tail recovery, snapshots (snapshot.py), listeners (delta, image)

Exceptions are in ``exceptions``; outcomes of commands are Kafka error codes, never exceptions.
"""
