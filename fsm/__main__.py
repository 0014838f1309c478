"""``python -m turnfsm``: the same as the ``turnfsm`` command (see :mod:`turnfsm.tools.cli`)."""

from .tools.cli import main

raise SystemExit(main())
