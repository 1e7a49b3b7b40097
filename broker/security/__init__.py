"""Who is on the other end of a Kafka connection, and how it proved it.

``session``: one connection's security state (listener, protocol, principal, SASL progress) and
the settings of a listener (:class:`ListenerSecurity`).  ``ssl_config``: Kafka's ``ssl.*`` keys
as an :class:`ssl.SSLContext`.  ``principal``: ``ssl.principal.mapping.rules`` (a certificate's
distinguished name to a principal).  The SASL mechanisms themselves are pure protocol code and
live in :mod:`kafka_protocol.sasl`; the ACLs and the authorizer live with the metadata image
(:mod:`metadata_log.acls`).
"""
