"""How closely `RealtimeTestServer` imitates the real OpenAI Realtime service: its timing
and rules (`Fidelity`), and the settings the realtime suite runs against."""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["FIDELITY_MATRIX", "IDEAL", "REAL_PROTOCOL", "UNEVEN_SPEECH", "Fidelity"]


@dataclass(frozen=True)
class Fidelity:
    """How closely the server imitates the real OpenAI Realtime service.

    The defaults (`IDEAL`) are the idealised server the realtime tests were first written
    against; `REAL_PROTOCOL` switches on the service's rules; `FIDELITY_MATRIX` adds its
    timing. Each value below names its source.

    Attributes:
        network_latency_ms: One-way latency, each direction: a client event is handled this
            long after the client sent it, a server event reaches the client this long
            after the server sent it.
        cancel_latency_ms: How long a cancelled response (``response.cancel`` or a
            ``turn_detected`` interruption) stays active, still streaming, before its
            ``response.done``. The real service keeps a cancelled response active until
            ``response.done`` and rejects ``response.create`` until then.
        transcript_lead_ms: How far the transcript runs ahead of the audio that speaks it
            (the real service streams text well ahead of audio).
        generation_speed: Audio generated per second of wall time, after the ``lead_ms``
            burst (the real service generates faster than real time).
        truncate_shortfall_ms: How much shorter the server's item audio is than the audio
            it sent: a ``conversation.item.truncate`` past the shorter length is rejected
            with ``Audio content of <n>ms is already shorter than <m>ms`` (seen as 85 ms,
            e.g. 6100 ms items for 6185 ms received).
        truncate_clears_transcript: A truncated item loses its server-side transcript
            (the ``openai`` package's ``ConversationItemTruncateEvent`` documents it);
            False keeps the part whose speech started before ``audio_end_ms``.
        state_errors_name_event: Errors about the conversation's state
            (``conversation_already_has_active_response``, a truncate past the end, an
            unknown item, no response to cancel) carry the client's ``event_id``. The real
            service sends ``null`` there, so a client cannot match them to its request.
        reject_malformed: A client event that does not conform to the ``openai`` package's
            client-event models is rejected with the service's error and not applied.
        speaking_rate_variation: How much each word's duration departs from the nominal
            ``chars_per_second`` (0.3: each word 0.7x to 1.3x as long). Real speech is not
            spoken at a constant rate, and the service gives no word timing.
    """

    network_latency_ms: int = 0
    cancel_latency_ms: int = 0
    transcript_lead_ms: int = 0
    generation_speed: float = 1.0
    truncate_shortfall_ms: int = 0
    truncate_clears_transcript: bool = False
    state_errors_name_event: bool = True
    reject_malformed: bool = True
    speaking_rate_variation: float = 0.0

    def __post_init__(self) -> None:
        for name in (
            "network_latency_ms",
            "cancel_latency_ms",
            "transcript_lead_ms",
            "truncate_shortfall_ms",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Fidelity.{name} must be an int >= 0, got {value!r}")
        if not 0.0 <= self.speaking_rate_variation < 1.0:
            raise ValueError(
                "Fidelity.speaking_rate_variation must be in [0, 1), got "
                f"{self.speaking_rate_variation!r}"
            )
        if not self.generation_speed >= 1.0:
            raise ValueError(
                f"Fidelity.generation_speed must be >= 1.0, got {self.generation_speed!r}"
            )


IDEAL = Fidelity()
"""The idealised server: instant cancels, no latency, text aligned with real-time audio."""

REAL_PROTOCOL = Fidelity(
    truncate_shortfall_ms=85,
    truncate_clears_transcript=True,
    state_errors_name_event=False,
)
"""The real service's rules, with no latency."""

FIDELITY_MATRIX: dict[str, Fidelity] = {
    "no-latency": REAL_PROTOCOL,
    "100ms-cancel-150ms": replace(
        REAL_PROTOCOL, network_latency_ms=100, cancel_latency_ms=150, generation_speed=2.0
    ),
    "300ms-text-1s-ahead": replace(
        REAL_PROTOCOL,
        network_latency_ms=300,
        cancel_latency_ms=150,
        transcript_lead_ms=1000,
        generation_speed=2.0,
    ),
}
"""The settings the realtime suite runs against (issue 10), by name.

Generation runs at 2x, not faster: a reply generated to its end before the caller barges
in leaves no text ahead of the audio the client holds."""

UNEVEN_SPEECH = replace(FIDELITY_MATRIX["300ms-text-1s-ahead"], speaking_rate_variation=0.3)
"""The harshest setting: the matrix's last cell, with words 0.7x to 1.3x their nominal
length, so no constant rate finds where the caller stopped hearing."""
