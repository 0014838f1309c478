"""The greeting carried by the reply itself: ``on_user_turn_completed`` as a call site.

LiveKit hands ``Agent.on_user_turn_completed`` a ``turn_ctx``: a copy of the agent's chat
context from which it generates the reply to the committed turn, right after the hook
returns (edits there shape that reply only; the history never sees them). When the
machine answers the callee's first words with ``StartGreeting``, its lever runs inside
the hook's own step (the hook is its :attr:`Site.call <.port.Site.call>`)
and writes the greeting into that ``turn_ctx`` as a system message marked
:data:`GREETING_REQUEST`. Nothing waits on the adapter:

* ``TurnAgent.llm_node`` finds the request in the ``chat_ctx`` of the reply it generates
  (:func:`requested_greeting`) and makes that reply the greeting;
* a reply LiveKit prepared before the turn ended (``preemptive_generation``, on by
  default) cannot be reused, the turn context having changed (the lever drops it first
  with ``session.interrupt()``, so LiveKit does not warn that it was invalidated);
* the greeting's outcome is known when the hook ends (:meth:`UserTurnHook.ended`):
  ``done`` when LiveKit goes on to generate the reply with the request in it, ``refused``
  when the agent's own hook stopped the reply (``StopResponse``), raised (LiveKit then
  skips it) or dropped the request from ``turn_ctx``. The machine says a refused greeting
  with a locked ``session.say``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from livekit.agents import AgentSession, StopResponse, llm, utils

from .effect_outcomes import PendingOutcome

GREETING_REQUEST = "turnfsm_greeting"
"""The ``extra`` key of the system message that asks the reply to be the greeting; its
value says how the message's text is meant: ``"text"`` (said as written) or
``"instructions"`` (for the model, which then replies without tools)."""

GreetingForm = Literal["text", "instructions"]

NO_REPLY = "turnfsm_no_reply"
"""The ``extra`` key of the system message that asks for no reply at all: a reply LiveKit
must get (``session.run`` waits for one) to a turn the machine rejected
(:mod:`.text_turns`); ``TurnAgent.llm_node`` yields nothing, the model is not asked."""


def reply_model(session: AgentSession) -> Any:
    """The model that replies for the running agent: its own, else the session's."""
    agent = session.current_agent
    return agent.llm if utils.is_given(agent.llm) and agent.llm is not None else session.llm


def requested_greeting(chat_ctx: llm.ChatContext) -> tuple[GreetingForm, str] | None:
    """The greeting a reply's context asks for: how its text is meant, and the text."""
    for item in chat_ctx.items:
        if item.type == "message" and GREETING_REQUEST in item.extra:
            return item.extra[GREETING_REQUEST], item.text_content or ""
    return None


def ask_greeting(chat_ctx: llm.ChatContext, form: GreetingForm, text: str) -> None:
    """Make the reply generated from ``chat_ctx`` the greeting (:data:`GREETING_REQUEST`)."""
    chat_ctx.add_message(role="system", content=text, extra={GREETING_REQUEST: form})


def asks_no_reply(chat_ctx: llm.ChatContext) -> bool:
    """Whether a reply's context asks for no reply (:data:`NO_REPLY`)."""
    return any(item.type == "message" and NO_REPLY in item.extra for item in chat_ctx.items)


@dataclass
class UserTurnHook:
    """One run of ``on_user_turn_completed`` for ``message``: the site of the steps the
    committed turn dispatches."""

    turn_ctx: llm.ChatContext
    """LiveKit's context for the reply to ``message``."""
    message: llm.ChatMessage
    greeting: PendingOutcome | None = None
    """The outcome of the greeting asked of this reply, reported when the hook ends."""
    agent_code_ran: bool = False
    """The agent's own hook is through: the reply's ``turn_ctx`` is the agent's now."""

    def ask_greeting(self, form: GreetingForm, text: str, outcome: PendingOutcome) -> None:
        """Make the reply to this turn the greeting; its outcome waits for the hook's end."""
        ask_greeting(self.turn_ctx, form, text)
        self.greeting = outcome

    def ended(self, error: BaseException | None) -> None:
        """The hook is through (``error``: what it raised): report the greeting's outcome."""
        self.agent_code_ran = True
        outcome, self.greeting = self.greeting, None
        if outcome is None:
            return
        if isinstance(error, StopResponse):
            outcome.resolve("refused", "the agent's on_user_turn_completed stopped the reply")
        elif error is not None:
            outcome.resolve(
                "refused", f"the agent's on_user_turn_completed raised {type(error).__name__}"
            )
        elif requested_greeting(self.turn_ctx) is None:
            outcome.resolve(
                "refused", "the agent's on_user_turn_completed removed it from turn_ctx"
            )
        else:
            outcome.resolve("done")
