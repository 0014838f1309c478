"""Scripted LLM, STT and TTS for simulated calls, on LiveKit's model base classes.

* :class:`ScriptedLLM` answers from a script (or a function of the request), streams its
  text slowly so an interruption lands mid-answer, can call tools (several in parallel),
  and can misbehave on purpose (call a tool on every request, ignore ``tool_choice``).
  Every request is recorded in :attr:`ScriptedLLM.requests`.
* :class:`ScriptedSTT` is a streaming STT that finds speech by frame energy and, through
  the :class:`~turnfsm.adapters.sim.speech.SpeechLedger`, transcribes exactly the words
  of the recorded lines that it heard.
* :class:`ScriptedTTS` turns text into a soft tone whose length is proportional to the
  text.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from livekit import rtc
from livekit.agents import llm, stt, tts, utils
from livekit.agents.language import LanguageCode
from livekit.agents.types import (
    DEFAULT_API_CONNECT_OPTIONS,
    NOT_GIVEN,
    APIConnectOptions,
    NotGivenOr,
)

from .speech import VOICED_RMS, DeliveredFrame, SpeechLedger, Utterance, WordTiming

__all__ = [
    "LLMRequest",
    "ScriptedLLM",
    "ScriptedReply",
    "ScriptedSTT",
    "ScriptedTTS",
    "ScriptedToolCall",
    "Transcript",
]


# --------------------------------------------------------------------------------------- LLM


@dataclass(frozen=True)
class ScriptedToolCall:
    """A tool call the scripted LLM makes.

    Attributes:
        name: Name of the function tool.
        arguments: JSON arguments, as a dict or an already-encoded string.
    """

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)

    def encoded_arguments(self) -> str:
        """The arguments as a JSON string."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class ScriptedReply:
    """One response of the scripted LLM: text, tool calls, or both (text first).

    Attributes:
        text: Text streamed to the session.
        tool_calls: Tool calls sent together in one chunk (parallel calls).
    """

    text: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()


@dataclass
class LLMRequest:
    """One call of :meth:`ScriptedLLM.chat`, as recorded for assertions.

    Times are ``loop.time()`` values.

    Attributes:
        index: Position in :attr:`ScriptedLLM.requests`.
        chat_ctx: Copy of the chat context that was sent.
        tool_choice: The ``tool_choice`` argument, None when not given.
        tool_names: Names of the tools offered.
        last_user_text: Text of the last user message in the context, if any.
        started_at: When the request was made.
        finished_at: When its stream ended (None while streaming or if never consumed).
        reply: What the LLM answered.
    """

    index: int
    chat_ctx: llm.ChatContext
    tool_choice: llm.ToolChoice | None
    tool_names: list[str]
    last_user_text: str | None
    started_at: float
    finished_at: float | None = None
    reply: ScriptedReply = field(default_factory=ScriptedReply)

    @property
    def num_tools(self) -> int:
        """How many tools were offered."""
        return len(self.tool_names)


ReplyScript = Sequence["ScriptedReply | str"] | Callable[[LLMRequest], "ScriptedReply | str"]
"""Replies consumed in order, or a function of the request that returns one."""


class ScriptedLLM(llm.LLM):
    """LLM that answers from a script and streams text at a human-like pace.

    Each text reply takes the next entry of ``replies`` (``default_reply`` once they run
    out), or the value of ``replies(request)`` when it is a function. Tool calls follow
    ``tool_choice`` like a well-behaved model: under ``"none"`` they are left out (and
    ``default_reply`` is said if nothing else remains), unless ``ignore_tool_choice``.

    Args:
        replies: The scripted replies, or a function of the :class:`LLMRequest`.
        chars_per_second: Pace of the streamed text.
        time_to_first_token: Delay before the first chunk, in seconds.
        default_reply: Text used when the script is exhausted or a reply is empty.
        always_call_tool: Name of a tool to call on every request (instead of the
            scripted reply) unless ``tool_choice`` is ``"none"``.
        tool_arguments: Arguments of the ``always_call_tool`` calls.
        ignore_tool_choice: Emit tool calls even when ``tool_choice`` is ``"none"``.
    """

    def __init__(
        self,
        replies: ReplyScript = (),
        *,
        chars_per_second: float = 60.0,
        time_to_first_token: float = 0.05,
        default_reply: str = "Okay.",
        always_call_tool: str | None = None,
        tool_arguments: dict[str, Any] | str | None = None,
        ignore_tool_choice: bool = False,
    ) -> None:
        super().__init__()
        if chars_per_second <= 0:
            raise ValueError("chars_per_second must be positive")
        self._replies = replies if callable(replies) else list(replies)
        self._next_reply = 0
        self.chars_per_second = chars_per_second
        self.time_to_first_token = time_to_first_token
        self.default_reply = default_reply
        self.always_call_tool = always_call_tool
        self.tool_arguments = tool_arguments if tool_arguments is not None else {}
        self.ignore_tool_choice = ignore_tool_choice
        self.requests: list[LLMRequest] = []
        """Every request, in order."""

    @property
    def model(self) -> str:
        return "scripted"

    @property
    def provider(self) -> str:
        return "turnfsm.sim"

    def chat(
        self,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        parallel_tool_calls: NotGivenOr[bool] = NOT_GIVEN,
        tool_choice: NotGivenOr[llm.ToolChoice] = NOT_GIVEN,
        extra_kwargs: NotGivenOr[dict[str, Any]] = NOT_GIVEN,
    ) -> llm.LLMStream:
        """Record the request, decide the reply, and stream it."""
        tools = tools or []
        request = LLMRequest(
            index=len(self.requests),
            chat_ctx=chat_ctx.copy(),
            tool_choice=tool_choice if utils.is_given(tool_choice) else None,
            tool_names=[tool.id for tool in tools],
            last_user_text=_last_user_text(chat_ctx),
            started_at=asyncio.get_running_loop().time(),
        )
        request.reply = self._decide_reply(request)
        self.requests.append(request)
        return _ScriptedLLMStream(
            self, request=request, chat_ctx=chat_ctx, tools=tools, conn_options=conn_options
        )

    def _decide_reply(self, request: LLMRequest) -> ScriptedReply:
        tools_allowed = request.tool_choice != "none" or self.ignore_tool_choice
        if self.always_call_tool is not None and tools_allowed:
            return ScriptedReply(
                tool_calls=(ScriptedToolCall(self.always_call_tool, self.tool_arguments),)
            )
        reply = self._scripted_reply(request)
        if not tools_allowed:
            reply = ScriptedReply(text=reply.text)
        if not reply.text and not reply.tool_calls:
            reply = ScriptedReply(text=self.default_reply)
        return reply

    def _scripted_reply(self, request: LLMRequest) -> ScriptedReply:
        if callable(self._replies):
            entry: ScriptedReply | str = self._replies(request)
        elif self._next_reply < len(self._replies):
            entry = self._replies[self._next_reply]
            self._next_reply += 1
        else:
            entry = self.default_reply
        return ScriptedReply(text=entry) if isinstance(entry, str) else entry


def _last_user_text(chat_ctx: llm.ChatContext) -> str | None:
    for item in reversed(chat_ctx.items):
        if item.type == "message" and item.role == "user":
            return item.text_content
    return None


class _ScriptedLLMStream(llm.LLMStream):
    def __init__(
        self,
        scripted_llm: ScriptedLLM,
        *,
        request: LLMRequest,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool],
        conn_options: APIConnectOptions,
    ) -> None:
        super().__init__(scripted_llm, chat_ctx=chat_ctx, tools=tools, conn_options=conn_options)
        self._scripted_llm = scripted_llm
        self._request = request

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        reply = self._request.reply
        chunk_id = utils.shortuuid("scripted_")
        try:
            await asyncio.sleep(self._scripted_llm.time_to_first_token)
            # word by word, each word with the space before it, at the configured pace
            words = reply.text.split(" ") if reply.text else []
            for position, word in enumerate(words):
                piece = word if position == 0 else f" {word}"
                self._event_ch.send_nowait(
                    llm.ChatChunk(
                        id=chunk_id, delta=llm.ChoiceDelta(role="assistant", content=piece)
                    )
                )
                await asyncio.sleep(len(piece) / self._scripted_llm.chars_per_second)
            if reply.tool_calls:
                self._event_ch.send_nowait(
                    llm.ChatChunk(
                        id=chunk_id,
                        delta=llm.ChoiceDelta(
                            role="assistant",
                            tool_calls=[
                                llm.FunctionToolCall(
                                    name=call.name,
                                    arguments=call.encoded_arguments(),
                                    call_id=utils.shortuuid("call_"),
                                )
                                for call in reply.tool_calls
                            ],
                        ),
                    )
                )
        finally:
            self._request.finished_at = loop.time()


# --------------------------------------------------------------------------------------- STT


@dataclass(frozen=True)
class Transcript:
    """A final transcript emitted by :class:`ScriptedSTT`.

    Attributes:
        text: The transcribed words, joined by spaces.
        at: Loop time when it was emitted.
        words: The heard words, with the utterance each one belongs to.
    """

    text: str
    at: float
    words: tuple[tuple[Utterance, WordTiming], ...] = field(repr=False)

    @property
    def utterances(self) -> list[Utterance]:
        """The utterances the words came from, in order, without repeats."""
        seen: dict[int, Utterance] = {}
        for utterance, _ in self.words:
            seen.setdefault(utterance.index, utterance)
        return list(seen.values())


FRAME_STALL_MARGIN = 0.5
"""Seconds past ``final_lag`` after which a segment ends when no frame arrives at all."""


class ScriptedSTT(stt.STT):
    """Streaming STT that transcribes exactly what it heard of the recorded lines.

    A frame is *voiced* when its RMS exceeds ``voiced_rms``; all-zero frames (silence
    between lines, or frames the session silenced during locked speech) never are. A
    speech segment runs from the first voiced frame until ``final_lag`` seconds of audio
    without one (audio time, so a late burst of frames is no pause; if no frame arrives at
    all, ``final_lag + FRAME_STALL_MARGIN`` wall seconds); its FINAL_TRANSCRIPT is emitted at
    that moment, framed by START_OF_SPEECH and END_OF_SPEECH events (which LiveKit uses only
    with ``turn_detection="stt"``).

    Which words were heard is taken from the ledger: each received frame is matched to
    the frame the audio input delivered (the same frame object, however late it arrives,
    e.g. held back and replayed; else by arrival time), and a word counts as heard when
    its middle lies in audio that reached the STT unsilenced. If only the tail of a line
    got through, only its tail is transcribed.

    Args:
        ledger: The ledger written by the call's audio input.
        final_lag: Seconds of silence after which a segment ends and its final is sent.
        interim_results: Also emit INTERIM_TRANSCRIPT events as words are heard.
        voiced_rms: Energy threshold of a voiced frame, in int16 units.
        language: Language reported with transcripts.
    """

    def __init__(
        self,
        ledger: SpeechLedger,
        *,
        final_lag: float = 0.1,
        interim_results: bool = False,
        voiced_rms: float = VOICED_RMS,
        language: str = "en",
    ) -> None:
        super().__init__(
            capabilities=stt.STTCapabilities(
                streaming=True, interim_results=interim_results, offline_recognize=False
            )
        )
        self.ledger = ledger
        self.final_lag = final_lag
        self.voiced_rms = voiced_rms
        self.language = language
        self.transcripts: list[Transcript] = []
        """Every final transcript emitted, by all streams, in order."""

    @property
    def model(self) -> str:
        return "scripted"

    @property
    def provider(self) -> str:
        return "turnfsm.sim"

    async def _recognize_impl(
        self,
        buffer: utils.AudioBuffer,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions,
    ) -> stt.SpeechEvent:
        raise NotImplementedError("ScriptedSTT only transcribes live streams")

    def stream(
        self,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
    ) -> stt.RecognizeStream:
        """Open a recognition stream fed by the session."""
        return _ScriptedRecognizeStream(self, conn_options=conn_options)


class _ScriptedRecognizeStream(stt.RecognizeStream):
    def __init__(self, scripted_stt: ScriptedSTT, *, conn_options: APIConnectOptions) -> None:
        super().__init__(stt=scripted_stt, conn_options=conn_options)
        self._scripted_stt = scripted_stt
        self._last_seq = -1
        self._heard: dict[int, list[tuple[float, float]]] = {}
        self._utterances: dict[int, Utterance] = {}
        self._transcribed: dict[int, set[int]] = {}
        self._interim_text = ""
        self._in_segment = False
        self._unvoiced = 0.0
        self._final_timer: asyncio.TimerHandle | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for item in self._input_ch:
                if isinstance(item, self._FlushSentinel):
                    self._end_segment()
                else:
                    self._on_frame(item, received_at=loop.time())
            self._end_segment()
        finally:
            if self._final_timer is not None:
                self._final_timer.cancel()

    def _on_frame(self, frame: rtc.AudioFrame, *, received_at: float) -> None:
        samples = np.frombuffer(frame.data, dtype=np.int16)
        silenced = not np.count_nonzero(samples)
        delivered = self._match_delivered(frame, received_at)
        if delivered is not None and delivered.utterance is not None and not silenced:
            utterance = delivered.utterance
            self._utterances[utterance.index] = utterance
            heard = self._heard.setdefault(utterance.index, [])
            start, end = delivered.offset, delivered.offset + delivered.duration
            if heard and start - heard[-1][1] <= delivered.duration / 2:
                heard[-1] = (heard[-1][0], max(end, heard[-1][1]))
            else:
                heard.append((start, end))

        rms = 0.0 if silenced else float(np.sqrt(np.mean(samples.astype(np.float64) ** 2)))
        final_lag = self._scripted_stt.final_lag
        if rms <= self._scripted_stt.voiced_rms:
            if self._in_segment:
                # silence is counted in audio time, not wall time: on a loaded machine frames
                # arrive in bursts, and a late burst is not a pause in the speech
                self._unvoiced += frame.samples_per_channel / frame.sample_rate
                if self._unvoiced >= final_lag:
                    self._end_segment()
            return
        self._unvoiced = 0.0
        if not self._in_segment:
            self._in_segment = True
            self._send(stt.SpeechEvent(type=stt.SpeechEventType.START_OF_SPEECH))
        if self._final_timer is not None:
            self._final_timer.cancel()
        # when no frame at all follows (input closed or held back), end the segment anyway
        self._final_timer = asyncio.get_running_loop().call_later(
            final_lag + FRAME_STALL_MARGIN, self._end_segment
        )
        if self._scripted_stt.capabilities.interim_results:
            text = " ".join(word.text for _, word in self._new_words())
            if text and text != self._interim_text:
                self._interim_text = text
                self._send(self._transcript_event(stt.SpeechEventType.INTERIM_TRANSCRIPT, text))

    def _match_delivered(self, frame: rtc.AudioFrame, received_at: float) -> DeliveredFrame | None:
        # by identity first: a frame held back and replayed later is still the input's
        match = self._scripted_stt.ledger.match_frame(frame, received_at, after_seq=self._last_seq)
        if match is not None:
            self._last_seq = max(self._last_seq, match.seq)
        return match

    def _new_words(self) -> list[tuple[Utterance, WordTiming]]:
        words = []
        for index in sorted(self._heard):
            utterance = self._utterances[index]
            done = self._transcribed.setdefault(index, set())
            for word in utterance.line.words_heard(self._heard[index]):
                if word.index not in done:
                    words.append((utterance, word))
        return words

    def _end_segment(self) -> None:
        if self._final_timer is not None:
            self._final_timer.cancel()
            self._final_timer = None
        if not self._in_segment:
            return
        self._in_segment = False
        self._unvoiced = 0.0
        self._interim_text = ""
        words = self._new_words()
        if words:
            for utterance, word in words:
                self._transcribed[utterance.index].add(word.index)
            text = " ".join(word.text for _, word in words)
            loop = asyncio.get_running_loop()
            self._scripted_stt.transcripts.append(
                Transcript(text=text, at=loop.time(), words=tuple(words))
            )
            self._send(self._transcript_event(stt.SpeechEventType.FINAL_TRANSCRIPT, text))
        self._send(stt.SpeechEvent(type=stt.SpeechEventType.END_OF_SPEECH))

    def _transcript_event(self, kind: stt.SpeechEventType, text: str) -> stt.SpeechEvent:
        return stt.SpeechEvent(
            type=kind,
            alternatives=[
                stt.SpeechData(
                    language=LanguageCode(self._scripted_stt.language), text=text, confidence=1.0
                )
            ],
        )

    def _send(self, event: stt.SpeechEvent) -> None:
        if not self._event_ch.closed:
            self._event_ch.send_nowait(event)


# --------------------------------------------------------------------------------------- TTS


class ScriptedTTS(tts.TTS):
    """Non-streaming TTS that renders text as a soft tone of proportional length.

    Args:
        chars_per_second: Speaking rate: the audio lasts ``len(text) / chars_per_second``.
        sample_rate: Output sample rate, in Hz (mono).
        tone_hz: Pitch of the tone.
        amplitude: Peak level, as a fraction of full scale.
        synthesis_delay: Time to first audio, in seconds.
        stream_pace: Push the audio in 0.1 s chunks at this many times real time, like a
            TTS that streams its audio as it renders it; None pushes it all at once.
    """

    def __init__(
        self,
        *,
        chars_per_second: float = 15.0,
        sample_rate: int = 24000,
        tone_hz: float = 220.0,
        amplitude: float = 0.2,
        synthesis_delay: float = 0.02,
        stream_pace: float | None = None,
    ) -> None:
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=False),
            sample_rate=sample_rate,
            num_channels=1,
        )
        if chars_per_second <= 0:
            raise ValueError("chars_per_second must be positive")
        self.chars_per_second = chars_per_second
        self.tone_hz = tone_hz
        self.amplitude = amplitude
        self.synthesis_delay = synthesis_delay
        if stream_pace is not None and stream_pace <= 0:
            raise ValueError("stream_pace must be positive")
        self.stream_pace = stream_pace
        self.texts: list[str] = []
        """Every text synthesized, in order."""

    @property
    def model(self) -> str:
        return "scripted"

    @property
    def provider(self) -> str:
        return "turnfsm.sim"

    def duration_of(self, text: str) -> float:
        """Length of the audio rendered for ``text``, in seconds."""
        return len(text.strip()) / self.chars_per_second

    def render(self, text: str) -> np.ndarray:
        """The int16 samples rendered for ``text``: a tone with 10 ms fades."""
        count = round(self.duration_of(text) * self.sample_rate)
        t = np.arange(count) / self.sample_rate
        wave = np.sin(2 * np.pi * self.tone_hz * t) * self.amplitude
        fade = min(count // 2, self.sample_rate // 100)
        if fade:
            ramp = np.linspace(0.0, 1.0, fade)
            wave[:fade] *= ramp
            wave[count - fade :] *= ramp[::-1]
        return (wave * 32767).astype(np.int16)

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> tts.ChunkedStream:
        """Render ``text``."""
        self.texts.append(text)
        return _ScriptedChunkedStream(self, input_text=text, conn_options=conn_options)


class _ScriptedChunkedStream(tts.ChunkedStream):
    def __init__(
        self, scripted_tts: ScriptedTTS, *, input_text: str, conn_options: APIConnectOptions
    ) -> None:
        super().__init__(tts=scripted_tts, input_text=input_text, conn_options=conn_options)
        self._scripted_tts = scripted_tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        output_emitter.initialize(
            request_id=utils.shortuuid("scripted_tts_"),
            sample_rate=self._scripted_tts.sample_rate,
            num_channels=1,
            mime_type="audio/pcm",
        )
        await asyncio.sleep(self._scripted_tts.synthesis_delay)
        samples = self._scripted_tts.render(self.input_text)
        pace = self._scripted_tts.stream_pace
        if pace is None:
            output_emitter.push(samples.tobytes())
        else:
            # paced against the clock, so a busy loop delays chunks without slowing them
            loop = asyncio.get_running_loop()
            began, chunk = loop.time(), self._scripted_tts.sample_rate // 10
            for index, start in enumerate(range(0, len(samples), chunk)):
                output_emitter.push(samples[start : start + chunk].tobytes())
                await asyncio.sleep(max(0.0, began + (index + 1) * 0.1 / pace - loop.time()))
        output_emitter.flush()
