"""Each adapter needs one of turnfsm's extras; imported without it, it says which.

Python alone says ``No module named 'livekit'``, which names neither turnfsm nor the
command that fixes it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping


def raise_if_extra_missing(
    error: ImportError, *, package: str, extra: str, needs: Mapping[str, str]
) -> None:
    """Raise an ImportError naming ``pip install 'turnfsm[<extra>]'`` when one of the
    modules ``package`` needs (``needs``: module → what it is) is not installed; return
    otherwise, so the caller re-raises ``error`` as it came (a module missing inside an
    installed LiveKit is not the extra's to fix).

    Called while handling ``error``, the ImportError of ``package``'s own imports.
    """
    for module, what in needs.items():
        try:
            installed = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # its parent package is not installed either
            installed = False
        if not installed:
            raise ImportError(
                f"{package} needs {what} ({module}), which is not installed: "
                f"pip install 'turnfsm[{extra}]'",
                name=module,
            ) from error
