"""Issue 21, point 1: levers only act, the machine decides.

Read from the source of the lever modules (:mod:`.levers`, :mod:`.realtime_levers`): no
lever reads what a decision is made of, the machine's state (``site.state``) or the
policy (``port.policy``): the effect carries the decision. Nor does a lever keep a
decision of its own for a later one: what the realtime levers keep between effects, and
what a lever leaves on the port, is only what they changed, to restore it, and their
wiring. (Before this, the realtime hold read the state and the policy to decide whether
and how to hold, and kept ``_gate_holds_turns`` to tell the resume whether to act.)
"""

from __future__ import annotations

import ast
from pathlib import Path

from benchmarks.structure import assignment_targets

ADAPTER = Path(__file__).resolve().parents[1] / "adapters" / "livekit"
LEVER_MODULES = ("levers", "realtime_levers")

KEPT_BY_THE_REALTIME_LEVERS = {
    "link": "the model's protocol tracker they act through",
    "port": "what they act on",
    "levers": "their table, by effect",
    "_saved_tool_choice": "the session's tool choice that ForbidTools replaced",
    "_tools_forbidden": "whether that replacement is in force",
    "_saved_turn_detection": "the turn detection that PauseModelReplies replaced",
    "_replies_paused": "whether that replacement is in force",
}
"""Every attribute the realtime levers set on themselves, and why it is no decision."""

LEFT_ON_THE_PORT = {
    "held_turn_settings": "the turn detection and discard setting HoldUserTurns replaced",
    "timers": "the running timers, cancelled by CancelTimer",
}
"""Every attribute of the port a lever sets, and why it is no decision."""


def _set_on(target: ast.expr, owner: str) -> str | None:
    """The attribute ``target`` sets on ``owner`` (``owner.x = ``, ``owner.x[k] = ``)."""
    while isinstance(target, ast.Subscript):
        target = target.value
    if (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == owner
    ):
        return target.attr
    return None


def decisions(source: str) -> list[str]:
    """Where ``source`` reads a decision's inputs, or keeps a field no list explains."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            if node.attr == "policy":
                found.append((node.lineno, f"reads {ast.unparse(node)}"))
            elif node.attr == "state" and ast.unparse(node.value) == "site":
                found.append((node.lineno, "reads site.state"))
        for target in assignment_targets(node):
            kept = _set_on(target, "self")
            if kept is not None and kept not in KEPT_BY_THE_REALTIME_LEVERS:
                found.append((node.lineno, f"keeps self.{kept}"))
            left = _set_on(target, "port")
            if left is not None and left not in LEFT_ON_THE_PORT:
                found.append((node.lineno, f"leaves port.{left}"))
    return [f"line {line}: {what}" for line, what in sorted(found)]


def test_no_lever_reads_the_state_or_the_policy_or_keeps_a_decision() -> None:
    found = {
        module: decisions((ADAPTER / f"{module}.py").read_text(encoding="utf-8"))
        for module in LEVER_MODULES
    }
    assert found == dict.fromkeys(LEVER_MODULES, [])


def test_the_check_finds_the_realtime_hold_that_decided() -> None:
    """The realtime hold and resume as they were before the machine decided for them."""
    source = (
        "class RealtimeLevers:\n"
        "    def _hold_user_turns(self, port, effect, site):\n"
        "        if site.state != 'greeting':\n"
        "            return\n"
        "        hold = port.policy.greeting_overlap == 'answer_whole'\n"
        "        port.require_gate().mute(hold_audio=hold)\n"
        "        self._gate_holds_turns = True\n"
        "    def _resume_user_turns(self, port, effect, site):\n"
        "        if self.port.policy.greeting_lock:\n"
        "            port.overlap_held = False\n"
    )
    assert decisions(source) == [
        "line 3: reads site.state",
        "line 5: reads port.policy",
        "line 7: keeps self._gate_holds_turns",
        "line 9: reads self.port.policy",
        "line 10: leaves port.overlap_held",
    ]
