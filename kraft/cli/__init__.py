"""The ``kraft`` command line: :mod:`~kraft.cli.main` (the parser, ``dev`` and ``server``) and
one module per family of admin commands.

    main            the parser and the node commands (dev, server)
    topics          kraft topics ...                              REST
    groups          kraft groups ...                              REST
    records         kraft produce / kraft consume                 REST
    consume_group   kraft consume --group: a consumer-group member  Kafka protocol
    cluster         kraft cluster status                          REST
    elect           the leader-election command                   Kafka protocol, via a broker
    rest_client     the REST admin API's client and the command wrapper
    arguments       shared argument types and the --admin/--json options
    output          tables, JSON and the one-line failure
    record_printer  how a consumed record is printed

Every REST command takes ``--admin URL`` (default ``$KRAFT_ADMIN`` or
``http://127.0.0.1:8080``) and ``--json``.  A failure prints one line,
``kraft: <ERROR>: <message>``, on stderr and exits with status 1.  Imports go one way: the
command modules import the shared ones, never each other (``records`` imports
``consume_group`` only when ``--group`` is given, and ``consume_group`` imports only the shared
modules).
"""
