"""``python -m turnfsm``: the same as the ``turnfsm`` command (see :mod:`turnfsm.cli`)."""

from .cli import main

raise SystemExit(main())
