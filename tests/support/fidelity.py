"""Pinning a realtime test's server to one `Fidelity`."""

from __future__ import annotations

import pytest

from turnfsm.adapters.sim.realtime import Fidelity

__all__ = ["pinned_fidelity"]


def pinned_fidelity(request: pytest.FixtureRequest) -> Fidelity | None:
    """The `Fidelity` a test is pinned to with ``@pytest.mark.fidelity(setting)``, else None
    (the run's). The plain-LiveKit baselines that need the idealised server are pinned to
    `IDEAL`, so the run's setting turns the suite red only on turnfsm."""
    marker = request.node.get_closest_marker("fidelity")
    if marker is None:
        return None
    setting = marker.args[0]
    if not isinstance(setting, Fidelity):
        raise pytest.UsageError(f"@pytest.mark.fidelity takes a Fidelity, got {setting!r}")
    return setting
