"""The ``kraft`` command line (:mod:`kraft.cli.main`) and its command families."""
