"""``TurnAgent``: the two agent hooks the adapter needs where no session event will do.

* ``on_user_turn_completed`` reports the committed turn *before* LiveKit replies, so the
  machine can reject it (``StopResponse``: no reply, not in the history) — needed for
  speech that overlapped the greeting.
* ``llm_node`` lets the reply to the callee's first words *be* the greeting: the callee's
  "Hello?" stays in the history, before the greeting, instead of being dropped as a turn
  that completed during a locked speech.

Use it as the base of your agent, or mix it in before ``Agent``::

    class Assistant(TurnAgent):
        def __init__(self) -> None:
            super().__init__(instructions="You are a helpful assistant.")
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from livekit.agents import Agent, llm
from livekit.agents.voice.agent import ModelSettings

from .adapter import adapter_for


class TurnAgent(Agent):
    """An ``Agent`` whose turn commits and greeting reply go through the turn machine."""

    turnfsm_hooks = True
    """Tells the adapter that user turns are reported by :meth:`on_user_turn_completed`."""

    async def on_user_turn_completed(
        self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
    ) -> None:
        adapter = adapter_for(self.session)
        if adapter is not None:
            adapter.user_turn_completed(new_message)
        await super().on_user_turn_completed(turn_ctx, new_message)

    def llm_node(
        self,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool],
        model_settings: ModelSettings,
    ) -> Any:
        adapter = adapter_for(self.session)
        greeting = adapter.take_greeting() if adapter is not None else None
        if greeting is None:
            return super().llm_node(chat_ctx, tools, model_settings)
        if greeting.text is not None:
            return _text_stream(greeting.text)
        context = chat_ctx.copy()
        context.add_message(role="system", content=greeting.instructions or "")
        return super().llm_node(context, [], model_settings)


async def _text_stream(text: str) -> AsyncIterator[str]:
    yield text
