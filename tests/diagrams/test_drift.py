"""The committed diagrams are the machine's: regenerate them with `make diagrams`."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from turnfsm.tools.cli import committed_diagrams, stale_diagrams

DIAGRAMS = Path(__file__).resolve().parents[2] / "diagrams"


def test_committed_diagrams_match_the_machine() -> None:
    assert {"outbound.mmd", "inbound.mmd"} <= set(committed_diagrams())
    stale = stale_diagrams(DIAGRAMS)
    assert not stale, "\n".join(stale)


def test_drift_check_fails_when_the_machine_gains_a_transition() -> None:
    # An extension builds a fresh class; run apart all the same (as a user would).
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path

        from turnfsm.tools.cli import stale_diagrams
        from turnfsm.machine import build_machine, chart_states

        def gave_up(chart):
            conversation = chart_states(chart)["conversation"]
            chart["agent_gave_up"] = conversation.speaking.to(conversation.listening)

        Drifted = build_machine(gave_up)

        print("\\n".join(stale_diagrams(Path(sys.argv[1]), Drifted)))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(DIAGRAMS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert f"{DIAGRAMS / 'outbound.mmd'} differs from the machine: run `make diagrams`" in (
        result.stdout
    )
    assert f"{DIAGRAMS / 'inbound.mmd'} differs" in result.stdout
