"""``python -m kraft.cli``: what the ``kraft`` console script runs."""

from kraft.cli.main import main

raise SystemExit(main())
