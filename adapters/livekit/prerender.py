"""The fixed texts of a call, synthesized before they are needed.

A policy's greeting, idle re-prompt and tool-cap fallback are known before the call is
answered. :class:`PrerenderedTexts` synthesizes those the call can say with the agent's
own TTS (after the session's ``tts_text_transforms``) as soon as the session's agent runs,
while an outbound call rings, and keeps the audio frames. The lever that says one then
hands LiveKit the frames: the greeting that replies to the callee's first words through
``TurnAgent.tts_node``, any other text (the re-prompt, the fallback, the greeting of the
await timer or the locked retry) with ``session.say(text, audio=...)``. Its first frame
reaches the output without waiting for the TTS's first byte.

The greeting is rendered first: the callee waits through its delay on nearly every call.
The re-prompt (when the policy has an idle timeout and re-prompts) follows, once the
greeting's is done: one TTS request at a time, so it never holds up the greeting's. The
tool-cap fallback is rendered when the machine asks for the final reply without tools
(the cap), while the model answers: it is said only if that reply says nothing, a model
round later. A call that never reaches the cap never pays for it, and a session whose
policy asks nothing of its tool steps sends its TTS only what LiveKit alone sends.

Rendering never changes the session's fate: it tries once (the live TTS keeps its
retries), and its failure is not reported to the session as a TTS error (LiveKit counts
those against ``max_unrecoverable_errors`` and closes the session past it). It is billed
as any TTS request, and LiveKit reports its metrics as such.

The live TTS is used instead, and the effect's outcome says so in its ``detail``
(``audio: live TTS, <why>``; ``audio: pre-rendered`` otherwise), when:

* the text is not ready yet (the callee spoke first, the idle timer fired first) or its
  synthesis failed;
* the text depends on the call (a greeting written by the model from instructions);
* the agent speaking has its own ``tts_node`` (it may change the text or the audio), or
  another TTS than the one that rendered it (a handoff), or the session has text
  transforms of its own (callables: their output is not known in advance);
* the model speaks itself (a realtime model) or the session has no audio output.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field

from livekit import rtc
from livekit.agents import Agent, AgentSession, APIConnectOptions, tts
from livekit.agents.utils import is_given
from livekit.agents.voice.transcription.filters import filter_emoji, filter_markdown

from turnfsm.policy import TurnPolicy

PRERENDERED = "audio: pre-rendered"
"""The ``detail`` of an outcome whose speech played pre-rendered audio."""

_FILTERS = {"filter_markdown": filter_markdown, "filter_emoji": filter_emoji}

ONE_TRY = APIConnectOptions(max_retry=0)
"""A rendering's connection options: a failed one is said live, which retries."""


@dataclass
class _Rendering:
    tts: tts.TTS
    task: asyncio.Task[None] | None = None
    frames: list[rtc.AudioFrame] = field(default_factory=list)
    spoken: str = ""
    """The text as the TTS got it (after the session's text transforms)."""
    failed: bool = False


class PrerenderedTexts:
    """Audio of fixed texts, synthesized once per call with the agent's TTS."""

    def __init__(self, session: AgentSession) -> None:
        self._session = session
        self._renderings: dict[str, _Rendering] = {}
        self._last: asyncio.Task[None] | None = None
        """The rendering started last: the next one waits for it."""
        self.expected_reply: str | None = None
        """A text a reply of the agent is about to carry (the greeting written into the
        turn context of the callee's first words): ``TurnAgent.tts_node`` plays it."""

    def start_call(self, policy: TurnPolicy) -> None:
        """The session's agent runs: render what the call may say word for word, the
        greeting first (if the policy has a text for it), then the re-prompt if the policy
        re-prompts."""
        reprompts = policy.idle_timeout is not None and policy.idle_max_reprompts > 0
        self.start(policy.greeting, policy.idle_message if reprompts else None)

    def start(self, *texts: str | None) -> None:
        """Start synthesizing ``texts`` in order, each once every rendering started before
        it is done (one TTS request at a time: the first text's is never held up), unless
        this session's agent could not play them. A text already started is not again."""
        agent = self._session.current_agent
        engine = _tts_of(self._session, agent)
        if engine is None or _own_tts_node(agent) or _custom_transforms(self._session):
            return
        loop = asyncio.get_running_loop()
        for text in texts:
            if text and text not in self._renderings:
                rendering = _Rendering(engine)
                rendering.task = loop.create_task(
                    self._render(text, rendering, after=self._last), name="turnfsm.prerender"
                )
                self._renderings[text] = rendering
                self._last = rendering.task

    async def _render(
        self, text: str, rendering: _Rendering, *, after: asyncio.Task[None] | None
    ) -> None:
        if after is not None:
            await asyncio.wait([after])  # done or failed alike: the TTS is free again
        try:
            spoken = await _transformed(text, self._session.options.tts_text_transforms)
            rendering.spoken = spoken
            stream = rendering.tts.synthesize(spoken, conn_options=ONE_TRY)
            # LiveKit's stream reports its failure on the TTS, where the session counts it
            # as its own; this one is not (its task runs after this step: in time)
            stream._emit_error = _not_the_sessions  # type: ignore[method-assign]
            async with stream:
                async for audio in stream:
                    rendering.frames.append(audio.frame)
        except Exception:  # the live TTS says it then; the outcome's detail tells why
            rendering.failed = True
            rendering.frames.clear()

    def frames(self, text: str) -> tuple[list[rtc.AudioFrame] | None, str]:
        """The text's frames if they can be played now, and the outcome detail to give."""
        rendering = self._renderings.get(text)
        if rendering is None:
            return None, "audio: live TTS, not pre-rendered"
        if rendering.failed:
            return None, "audio: live TTS, pre-rendering failed"
        if rendering.task is None or not rendering.task.done() or not rendering.frames:
            return None, "audio: live TTS, pre-rendering not done in time"
        agent = self._session.current_agent
        if _own_tts_node(agent) or _tts_of(self._session, agent) is not rendering.tts:
            return None, "audio: live TTS, the agent speaking has another TTS or tts_node"
        return rendering.frames, PRERENDERED

    def expect(self, text: str) -> str:
        """A reply of the agent is about to carry ``text``: its ``tts_node`` plays the
        pre-rendered frames if they can be played now. Returns the outcome detail."""
        frames, detail = self.frames(text)
        self.expected_reply = text if frames is not None else None
        return detail

    def take_expected(self, spoken: str) -> list[rtc.AudioFrame] | None:
        """The frames of the expected reply, if ``spoken`` (the text the ``tts_node``
        received) is it; the expectation is used up either way."""
        text, self.expected_reply = self.expected_reply, None
        rendering = self._renderings.get(text) if text is not None else None
        if rendering is None or " ".join(spoken.split()) != " ".join(rendering.spoken.split()):
            return None
        return rendering.frames

    def close(self) -> None:
        """The session closes: stop what is still being synthesized."""
        for rendering in self._renderings.values():
            if rendering.task is not None:
                rendering.task.cancel()


def _not_the_sessions(api_error: Exception, recoverable: bool) -> None:
    """A rendering's failed attempt: :meth:`PrerenderedTexts.frames` tells it."""


async def played(frames: list[rtc.AudioFrame]) -> AsyncIterator[rtc.AudioFrame]:
    """The frames as the audio stream LiveKit plays (``say(audio=)``, a ``tts_node``)."""
    for frame in frames:
        yield frame


def _tts_of(session: AgentSession, agent: Agent | None) -> tts.TTS | None:
    """The TTS the agent speaks with (its own, else the session's), as LiveKit picks it."""
    if agent is None or session.output.audio is None:
        return None
    engine = agent.tts if is_given(agent.tts) else session.tts
    return engine if isinstance(engine, tts.TTS) else None


def _own_tts_node(agent: Agent | None) -> bool:
    """Whether a class of the agent replaces LiveKit's ``tts_node`` (``TurnAgent``'s, which
    plays the pre-rendered greeting and is LiveKit's otherwise, is marked)."""
    return any(
        "tts_node" in vars(cls) and not getattr(vars(cls)["tts_node"], "plays_prerendered", False)
        for cls in type(agent).__mro__
        if cls is not Agent
    )


def _custom_transforms(session: AgentSession) -> bool:
    transforms = session.options.tts_text_transforms or ()
    return any(not isinstance(t, str) or t not in _FILTERS for t in transforms)


async def _transformed(text: str, transforms: object) -> str:
    """The text as LiveKit's built-in ``tts_text_transforms`` hand it to the TTS."""

    async def source() -> AsyncIterator[str]:
        yield text

    stream: AsyncIterable[str] = source()
    for name in transforms or ():  # type: ignore[attr-defined]
        stream = _FILTERS[name](stream)
    return "".join([chunk async for chunk in stream])
