"""Realtime suite glue: the protocol server's fidelity for a whole run.

``TURNFSM_REALTIME_FIDELITY=<name>`` runs every test whose server does not pin its own
`Fidelity` against ``FIDELITY_MATRIX[name]`` (``ideal``, the default, is `IDEAL`;
``uneven-speech`` is `UNEVEN_SPEECH`), e.g.::

    TURNFSM_REALTIME_FIDELITY=300ms-text-1s-ahead .venv/bin/python -m pytest tests/realtime
"""

from __future__ import annotations

import os

import pytest

from turnfsm.adapters.sim.realtime import (
    FIDELITY_MATRIX,
    IDEAL,
    UNEVEN_SPEECH,
    RealtimeTestServer,
)

_FIDELITIES = {"ideal": IDEAL, **FIDELITY_MATRIX, "uneven-speech": UNEVEN_SPEECH}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "fidelity(setting): the test's server runs at this Fidelity, whatever "
        "TURNFSM_REALTIME_FIDELITY says (support.fidelity.pinned_fidelity)",
    )
    name = os.environ.get("TURNFSM_REALTIME_FIDELITY", "ideal")
    if name not in _FIDELITIES:
        raise pytest.UsageError(
            f"TURNFSM_REALTIME_FIDELITY must be one of {sorted(_FIDELITIES)}, got {name!r}"
        )
    RealtimeTestServer.default_fidelity = _FIDELITIES[name]


def pytest_report_header(config: pytest.Config) -> str:
    return f"realtime server fidelity: {os.environ.get('TURNFSM_REALTIME_FIDELITY', 'ideal')}"
