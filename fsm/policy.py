"""The call policy: every turn-taking choice of a call, validated at construction.

Option names follow what users already know from LiveKit (``allow_interruptions``,
``max_tool_steps``) and from hosted voice platforms (``first_speaker``,
``max_call_duration``, idle re-prompts). A bad value raises ``ValueError`` naming the
field and what it accepts.

>>> TurnPolicy(direction="outbound", greeting="Hi, this is Ada from Acme.").first_speaker
'user'
>>> TurnPolicy(direction="sideways")
Traceback (most recent call last):
...
ValueError: direction must be one of ('inbound', 'outbound'), got 'sideways'
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any, Literal, get_args

import attrs

from .fields import Text, lone_surrogate

Direction = Literal["inbound", "outbound"]
Speaker = Literal["user", "agent"]
AwaitUserTimeoutAction = Literal["greet", "hang_up"]
GreetingLock = Literal["mute_input", "keep_listening"]
GreetingOverlap = Literal["drop", "answer_whole"]
GreetOn = Literal["final_transcript", "end_of_turn"]
InterruptedText = Literal["spoken", "drop", "keep"]
AnsweringMachineAction = Literal["hang_up", "continue"]

MAX_COUNT = 1_000_000
"""The largest count a policy takes (``max_tool_steps``, ``idle_max_reprompts``)."""

MAX_TEXT_CHARS = 10_000
"""The longest text a policy takes (about ten minutes of speech)."""


def _one_of(choices: Any) -> Any:
    """A validator accepting the values of the ``Literal`` type ``choices``, so the type
    and the check are declared once."""
    allowed = get_args(choices)

    def check(_instance: object, attribute: attrs.Attribute, value: object) -> None:
        if value not in allowed:
            raise ValueError(f"{attribute.name} must be one of {allowed}, got {value!r}")

    return check


def _seconds(*, optional: bool) -> Any:
    def check(_instance: object, attribute: attrs.Attribute, value: object) -> None:
        if value is None and optional:
            return
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not (math.isfinite(value) and value > 0)
        ):
            # infinity is no duration a trace can hold (JSON has none): None is "no limit"
            allowed = "a finite number of seconds > 0" + (" or None (no limit)" * optional)
            raise ValueError(f"{attribute.name} must be {allowed}, got {value!r}")

    return check


def _count(minimum: int) -> Any:
    def check(_instance: object, attribute: attrs.Attribute, value: object) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not (minimum <= value <= MAX_COUNT)
        ):
            raise ValueError(
                f"{attribute.name} must be an integer from {minimum} to {MAX_COUNT}, got {value!r}"
            )

    return check


def _flag(_instance: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{attribute.name} must be True or False, got {value!r}")


def _optional_text(_instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"{attribute.name} must be a non-empty string or None, got {value!r}")
    if value is not None:
        _writable(attribute.name, value)


def _text(_instance: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{attribute.name} must be a non-empty string, got {value!r}")
    _writable(attribute.name, value)


def _writable(name: str, text: str) -> None:
    """Refuse a text a trace kept with ``keep_text`` could not hold; the message shows
    its length or the offending position, never the text (it may be private)."""
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"{name} must be at most {MAX_TEXT_CHARS} characters, got {len(text)}")
    if (index := lone_surrogate(text)) is not None:
        raise ValueError(
            f"{name} must be text: a lone surrogate (\\ud800-\\udfff, at index {index}) "
            "cannot be written to a trace"
        )


@attrs.frozen(kw_only=True)
class TurnPolicy:
    """How a call takes turns. Every field is documented in the README's option table."""

    direction: Direction = attrs.field(default="inbound", validator=_one_of(Direction))
    """``outbound`` calls start ringing and wait for the callee to pick up; ``inbound``
    ones wait in ``start`` for the session to start."""

    first_speaker: Speaker = attrs.field(validator=_one_of(Speaker))
    """Who speaks first once the call is answered. Default: ``user`` for outbound calls
    (wait for the callee's "Hello?"), ``agent`` for inbound ones."""

    greeting: Text | None = attrs.field(default=None, validator=_optional_text)
    """Fixed greeting text, said locked. Without it (nor ``greeting_instructions``) on an
    inbound call where the agent speaks first, the agent's own first speech is the
    greeting, locked the same way."""

    greeting_instructions: Text | None = attrs.field(default=None, validator=_optional_text)
    """Instructions for a generated greeting, instead of ``greeting``."""

    await_user_timeout: float | None = attrs.field(default=8.0, validator=_seconds(optional=True))
    """Seconds to wait for the callee's first words before ``on_await_user_timeout``."""

    on_await_user_timeout: AwaitUserTimeoutAction = attrs.field(
        default="greet", validator=_one_of(AwaitUserTimeoutAction)
    )
    """Greet anyway, or hang up, when the callee stays silent."""

    greeting_lock: GreetingLock = attrs.field(
        default="keep_listening", validator=_one_of(GreetingLock)
    )
    """``mute_input``: the caller is not heard during the greeting. ``keep_listening``: the
    caller is heard, but nothing interrupts the greeting and no turn is committed in it."""

    greeting_overlap: GreetingOverlap = attrs.field(
        default="answer_whole", validator=_one_of(GreetingOverlap)
    )
    """Speech overlapping the greeting: ``drop`` it, or answer it as one whole turn after
    the greeting (never a tail fragment)."""

    greet_on: GreetOn = attrs.field(default="final_transcript", validator=_one_of(GreetOn))
    """When the callee's first words start the greeting: on their first non-empty
    ``final_transcript`` (the STT's final, about 0.5 s before LiveKit ends the turn; the
    words are committed with the greeting's reply, before it, and the rest of the
    callee's speech overlaps the greeting), or at LiveKit's ``end_of_turn`` (its
    endpointing and turn detector judge the words, and the agent's
    ``on_user_turn_completed`` runs on them, as on every turn)."""

    spill_over_window: float = attrs.field(default=0.5, validator=_seconds(optional=False))
    """With ``greeting_lock="mute_input"`` and ``greeting_overlap="drop"``: speech heard
    within this many seconds of unmuting is the tail of an overlap, and is dropped."""

    interrupted_text: InterruptedText = attrs.field(
        default="spoken", validator=_one_of(InterruptedText)
    )
    """What an interrupted reply leaves in the chat context: the ``spoken`` prefix,
    nothing (``drop``), or the full text (``keep``, LiveKit's behaviour without a
    transcript synchronizer)."""

    max_tool_steps: int = attrs.field(default=3, validator=_count(1))
    """Exactly this many tool rounds per user turn (parallel calls in one step count
    once); then one final reply without tools."""

    tool_cap_fallback: Text = attrs.field(
        default="Sorry, I couldn't finish that. Could you ask me again?", validator=_text
    )
    """Said when the model still calls tools in the final reply."""

    mute_input_during_tools: bool = attrs.field(default=False, validator=_flag)
    """Mute the caller while tools run (no barge-in into a tool step)."""

    tool_reply_hold: float | None = attrs.field(default=3.0, validator=_seconds(optional=True))
    """The caller barged into a tool step: the reply to the tool output waits for LiveKit's
    decision, made when the caller's turn ends: an interruption throws it away unsent (no
    wasted model request, no tool started after it), a turn too short to interrupt
    (``min_words``) releases it at once. At most this many seconds after the caller stops
    speaking (a turn LiveKit never ends: a noise with no words), then it goes to the
    model. 3.0 is LiveKit's endpointing ``max_delay``. None leaves the tool step to
    LiveKit alone: every turn committed while the tools run interrupts the step, however
    short (LiveKit applies ``min_words`` only to its current speech)."""

    idle_timeout: float | None = attrs.field(default=None, validator=_seconds(optional=True))
    """Seconds of silence while listening before a re-prompt; None disables."""

    idle_max_reprompts: int = attrs.field(default=2, validator=_count(0))
    """Re-prompts before hanging up on a silent caller."""

    idle_message: Text = attrs.field(default="Are you still there?", validator=_text)
    """The re-prompt text."""

    max_call_duration: float | None = attrs.field(default=None, validator=_seconds(optional=True))
    """Hang up after this many seconds from the answer; None disables."""

    on_answering_machine: AnsweringMachineAction = attrs.field(
        default="hang_up", validator=_one_of(AnsweringMachineAction)
    )
    """What to do when answering-machine detection says a machine picked up (outbound
    calls: an inbound call ignores the verdict)."""

    model_reply_wait: float = attrs.field(default=2.0, validator=_seconds(optional=False))
    """Realtime models that answer on their own: seconds to wait for the model's own reply
    (to the callee's first words, replaced by the greeting; to tool output at the cap,
    adopted as the final reply) before asking for the reply."""

    response_done_wait: float = attrs.field(default=5.0, validator=_seconds(optional=False))
    """Realtime models: the longest wait for the model's active response to finish
    (``response.done``; it refuses a new one until then) before asking anyway."""

    @first_speaker.default
    def _first_speaker_for_direction(self) -> Speaker:
        return "user" if self.direction == "outbound" else "agent"

    def __attrs_post_init__(self) -> None:
        if self.greeting is not None and self.greeting_instructions is not None:
            raise ValueError("greeting and greeting_instructions are exclusive: set one")
        if self.direction == "outbound" and not self.has_greeting:
            raise ValueError(
                "greeting or greeting_instructions is required for an outbound call: the "
                "agent's own code cannot greet the callee (its on_enter runs while the call "
                'is still ringing): e.g. TurnPolicy(direction="outbound", '
                'greeting="Hi, this is Ada from Acme.")'
            )

    @property
    def has_greeting(self) -> bool:
        """Whether this call has a greeting to say."""
        return self.greeting is not None or self.greeting_instructions is not None

    @property
    def greets_in_own_words(self) -> bool:
        """The agent greets first with no greeting text of the policy's: its own first
        speech (a ``say`` or ``generate_reply`` in ``on_enter``) is the greeting."""
        return self.first_speaker == "agent" and not self.has_greeting

    @property
    def mutes_greeting(self) -> bool:
        """Whether the input is muted during the greeting."""
        return self.greeting_lock == "mute_input"

    @property
    def can_mute_input(self) -> bool:
        """Whether the machine may mute (or hold) the caller's audio on this call."""
        return self.mutes_greeting or self.mute_input_during_tools

    @classmethod
    def from_dict(cls, data: object) -> TurnPolicy:
        """The policy a table of its fields describes (a JSON object, a TOML table).

        Unlike ``TurnPolicy(**data)``, a key that is no field is a ``ValueError`` naming
        it (with the closest field), not a ``TypeError``:

        >>> TurnPolicy.from_dict({"direction": "outbound", "greting": "Hi."})
        Traceback (most recent call last):
        ...
        ValueError: unknown policy field 'greting' (did you mean 'greeting'?)
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a policy is a table of TurnPolicy fields, got {data!r}")
        fields = [field.name for field in attrs.fields(cls)]
        for key in data:
            if key not in fields:
                close = difflib.get_close_matches(str(key), fields, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f"; fields: {fields}"
                raise ValueError(f"unknown policy field {key!r}{hint}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """The policy as plain JSON-able data (``TurnPolicy(**d)`` rebuilds it)."""
        return attrs.asdict(self)
