"""``TurnAgent``: the agent hooks the adapter needs where no session event will do.

* ``on_user_turn_completed`` reports the committed turn *before* LiveKit replies, so the
  machine can reject it (``StopResponse``: no reply, not in the history) — needed for
  speech that overlapped the greeting.
* ``llm_node`` lets the reply to the callee's first words *be* the greeting: the callee's
  "Hello?" stays in the history, before the greeting, instead of being dropped as a turn
  that completed during a locked speech.
* ``transcription_node`` reports each speech's text as it is forwarded, so an interrupted
  reply reaches the machine in full even when a ``TranscriptSynchronizer`` made LiveKit
  commit only its synchronized prefix (``interrupted_text="keep"`` keeps the full text).

Use it as the base of your agent, or mix it in before ``Agent``::

    class Assistant(TurnAgent):
        def __init__(self) -> None:
            super().__init__(instructions="You are a helpful assistant.")
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from livekit.agents import Agent, llm
from livekit.agents.types import TimedString
from livekit.agents.voice.agent import ModelSettings

from .adapter import TurnAdapter, adapter_for


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

    def transcription_node(
        self, text: AsyncIterable[str | TimedString], model_settings: ModelSettings
    ) -> Any:
        adapter = adapter_for(self.session)
        speech = self.session.current_speech  # the speech being forwarded, at call time
        node = super().transcription_node(text, model_settings)
        if adapter is None or speech is None:
            return node
        return _reported(adapter, speech.id, node)


async def _reported(
    adapter: TurnAdapter, speech_id: str, node: Any
) -> AsyncIterator[str | TimedString]:
    source = await node if inspect.isawaitable(node) else node
    if source is None:
        return
    async for delta in source:
        adapter.forwarded_text(speech_id, str(delta))
        yield delta


async def _text_stream(text: str) -> AsyncIterator[str]:
    yield text
