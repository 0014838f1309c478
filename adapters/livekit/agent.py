"""``TurnAgent``: the agent hooks the adapter needs where no session event will do.

* ``on_user_turn_completed`` reports the committed turn *before* LiveKit replies, so the
  machine can reject it (``StopResponse``: no reply, not in the history) — needed for
  speech that overlapped the greeting.
* ``llm_node`` lets the reply to the callee's first words *be* the greeting: the callee's
  "Hello?" stays in the history, before the greeting, instead of being dropped as a turn
  that completed during a locked speech. The greeting reaches it in the reply's own chat
  context, where the turn hook's step wrote it (:mod:`.turn_hook`).
* ``llm_node`` also waits, before it asks the model for the reply to a tool step's
  output, while the machine holds that reply (``HoldToolReply``: the caller barged into
  the step and LiveKit has not decided yet), and asks nothing if it is released unsent.
* ``tts_node`` plays the greeting's pre-rendered audio (:mod:`.prerender`) when the reply
  to the callee's first words carries it, and is LiveKit's own otherwise.
* ``transcription_node`` reports each speech's text as it is forwarded, so an interrupted
  reply reaches the machine in full even when a ``TranscriptSynchronizer`` made LiveKit
  commit only its synchronized prefix (``interrupted_text="keep"`` keeps the full text).

Use it as the base of your agent, or mix it in before ``Agent``::

    class Assistant(TurnAgent):
        def __init__(self) -> None:
            super().__init__(instructions="You are a helpful assistant.")

A subclass may override ``llm_node`` or ``on_user_turn_completed`` and not call
``super()``: the turnfsm part runs first anyway (:meth:`TurnAgent.__init_subclass__`
wraps the override), so the greeting still replaces the reply to the first words and a
rejected turn is still refused before the override runs. Before the callee was greeted
no reply reaches the model (a preemptive reply to "Hello?", a reply asked for in
``on_enter``): its ``llm_node`` yields nothing, and the adapter interrupts it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

from livekit import rtc
from livekit.agents import Agent, llm
from livekit.agents.types import TimedString
from livekit.agents.voice.agent import ModelSettings

from .adapter import TurnAdapter, adapter_for
from .turn_hook import asks_no_reply, requested_greeting


class TurnAgent(Agent):
    """An ``Agent`` whose turn commits and greeting reply go through the turn machine."""

    turnfsm_hooks = True
    """Tells the adapter that user turns are reported by :meth:`on_user_turn_completed`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Keep the turnfsm hooks in front of a subclass's own ``llm_node`` and
        ``on_user_turn_completed``, whether or not they call ``super()``."""
        super().__init_subclass__(**kwargs)
        if "llm_node" in cls.__dict__:
            cls.llm_node = _greeting_first(cls.__dict__["llm_node"])  # type: ignore[method-assign]
        if "on_user_turn_completed" in cls.__dict__:
            own = cls.__dict__["on_user_turn_completed"]
            cls.on_user_turn_completed = _turn_reported_first(own)  # type: ignore[method-assign]

    async def on_user_turn_completed(
        self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
    ) -> None:
        own = super().on_user_turn_completed
        await _turn_reported_around(self, turn_ctx, new_message, own)

    def llm_node(
        self,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool],
        model_settings: ModelSettings,
    ) -> Any:
        node = _turnfsm_node(self, chat_ctx, model_settings)
        if node is not None:
            return node
        own = functools.partial(super().llm_node, chat_ctx, tools, model_settings)
        return _after_tool_reply_hold(self, chat_ctx, own)

    def tts_node(self, text: AsyncIterable[str], model_settings: ModelSettings) -> Any:
        adapter = adapter_for(self.session)
        if adapter is None or adapter.prerendered.expected_reply is None:
            return super().tts_node(text, model_settings)
        return _prerendered_or_synthesized(self, adapter, text, model_settings)

    tts_node.plays_prerendered = True  # type: ignore[attr-defined]

    def transcription_node(
        self, text: AsyncIterable[str | TimedString], model_settings: ModelSettings
    ) -> Any:
        adapter = adapter_for(self.session)
        speech = self.session.current_speech  # the speech being forwarded, at call time
        node = super().transcription_node(text, model_settings)
        if adapter is None or speech is None:
            return node
        return _reported(adapter, speech.id, node)


async def _turn_reported_around(
    agent: Agent,
    turn_ctx: llm.ChatContext,
    message: llm.ChatMessage,
    own: Callable[[llm.ChatContext, llm.ChatMessage], Awaitable[None]],
) -> None:
    """Report the committed turn (the machine may reject it: ``StopResponse``), run the
    agent's own hook, then end the report with what the hook did: a greeting the turn's
    step wrote into ``turn_ctx`` is done if LiveKit goes on to reply, else refused."""
    adapter = adapter_for(agent.session)
    hook = adapter.user_turn_completed(turn_ctx, message) if adapter is not None else None
    if adapter is None or hook is None:  # detached, or reported by an outer wrapper
        await own(turn_ctx, message)
        return
    try:
        await own(turn_ctx, message)
    except BaseException as error:
        adapter.user_turn_hook_ended(hook, error)
        raise
    adapter.user_turn_hook_ended(hook, None)


def _turnfsm_node(
    agent: Agent, chat_ctx: llm.ChatContext, model_settings: ModelSettings
) -> Any | None:
    """The reply turnfsm makes of this generation, or ``None`` to let the agent's own run:
    the greeting when the machine wants it said now, and no reply at all before the
    callee was greeted or to a typed turn the machine rejected (the adapter interrupts
    it; the model is not asked)."""
    adapter = adapter_for(agent.session)
    if adapter is None:
        return None
    if asks_no_reply(chat_ctx):
        return _no_reply()
    greeting = requested_greeting(chat_ctx)
    if greeting is None:
        return _no_reply() if adapter.before_greeting() else None
    form, text = greeting
    if form == "text":
        return _text_stream(text)
    # the request is a system message with the instructions: the model says the greeting
    return Agent.default.llm_node(agent, chat_ctx, [], model_settings)


def _after_tool_reply_hold(agent: Agent, chat_ctx: llm.ChatContext, own: Callable[[], Any]) -> Any:
    """The agent's own node, or, for the reply to a held tool step's output
    (``HoldToolReply``), the same once the machine released it: nothing if unsent."""
    adapter = adapter_for(agent.session)
    gate = adapter.tool_reply_holds.gate_for(chat_ctx) if adapter is not None else None
    return own() if gate is None else _held_node(gate, own)


async def _held_node(gate: asyncio.Future[bool], own: Callable[[], Any]) -> AsyncIterator[Any]:
    # shielded: LiveKit cancelling this node (it interrupted the speech) leaves the gate
    # to the machine's release
    if not await asyncio.shield(gate):
        return
    node = own()
    source = await node if inspect.isawaitable(node) else node
    if source is None:
        return
    if isinstance(source, str):
        yield source
        return
    async for chunk in source:
        yield chunk


def _greeting_first(own: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(own)
    def llm_node(
        self: Agent,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool],
        model_settings: ModelSettings,
    ) -> Any:
        node = _turnfsm_node(self, chat_ctx, model_settings)
        if node is not None:
            return node
        agents_own = functools.partial(own, self, chat_ctx, tools, model_settings)
        return _after_tool_reply_hold(self, chat_ctx, agents_own)

    return llm_node


def _turn_reported_first(own: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(own)
    async def on_user_turn_completed(
        self: Agent, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
    ) -> None:
        # the turnfsm part runs first; a second report (``super()``) is ignored
        await _turn_reported_around(self, turn_ctx, new_message, functools.partial(own, self))

    return on_user_turn_completed


async def _reported(
    adapter: TurnAdapter, speech_id: str, node: Any
) -> AsyncIterator[str | TimedString]:
    source = await node if inspect.isawaitable(node) else node
    if source is None:
        return
    async for delta in source:
        adapter.forwarded_text(speech_id, str(delta))
        yield delta


async def _prerendered_or_synthesized(
    agent: TurnAgent, adapter: TurnAdapter, text: AsyncIterable[str], model_settings: ModelSettings
) -> AsyncIterator[rtc.AudioFrame]:
    """The greeting's pre-rendered frames if this reply's text is the greeting (read
    whole first: it arrives at once, from ``llm_node``), else LiveKit's TTS over it."""
    chunks = [chunk async for chunk in text]
    frames = adapter.prerendered.take_expected("".join(chunks))
    if frames is not None:
        for frame in frames:
            yield frame
        return
    node = super(TurnAgent, agent).tts_node(_chunks(chunks), model_settings)
    synthesized = await node if inspect.isawaitable(node) else node
    if synthesized is not None:  # a node may return None: no audio
        async for frame in synthesized:
            yield frame


async def _chunks(chunks: list[str]) -> AsyncIterator[str]:
    for chunk in chunks:
        yield chunk


async def _text_stream(text: str) -> AsyncIterator[str]:
    yield text


async def _no_reply() -> AsyncIterator[str]:
    return
    yield  # an async generator that yields nothing
