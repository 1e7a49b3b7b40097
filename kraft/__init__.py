"""Controller quorum, REST admin API and the ``kraft`` command line."""

__version__ = "0.1.0"
