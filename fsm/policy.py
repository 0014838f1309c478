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


@attrs.frozen
class OneOf:
    """A validator accepting the values of a ``Literal`` type, so the type and the check
    are declared once."""

    choices: tuple[Any, ...]

    @classmethod
    def of(cls, literal: Any) -> OneOf:
        return cls(get_args(literal))

    def __call__(self, _instance: object, attribute: attrs.Attribute, value: object) -> None:
        if value not in self.choices:
            raise ValueError(f"{attribute.name} must be one of {self.choices}, got {value!r}")


@attrs.frozen
class Seconds:
    """A validator accepting a duration (and ``None``, no limit, when ``optional``)."""

    optional: bool

    def __call__(self, _instance: object, attribute: attrs.Attribute, value: object) -> None:
        if value is None and self.optional:
            return
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not (math.isfinite(value) and value > 0)
        ):
            # infinity is no duration a trace can hold (JSON has none): None is "no limit"
            allowed = "a finite number of seconds > 0" + (" or None (no limit)" * self.optional)
            raise ValueError(f"{attribute.name} must be {allowed}, got {value!r}")


@attrs.frozen
class Count:
    """A validator accepting a count from ``minimum`` to :data:`MAX_COUNT`."""

    minimum: int

    def __call__(self, _instance: object, attribute: attrs.Attribute, value: object) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not (self.minimum <= value <= MAX_COUNT)
        ):
            raise ValueError(
                f"{attribute.name} must be an integer from {self.minimum} to {MAX_COUNT}, "
                f"got {value!r}"
            )


OPTION = "turnfsm.option"
"""The key of a policy field's :class:`Option` in its attrs metadata."""


@attrs.frozen(kw_only=True)
class Option:
    """What the README's option table and the tests' draws know of a policy field, beside
    its type, default and validator (``turnfsm diagrams --readme`` writes the table from
    it; :func:`turnfsm.testing.drawn_values` the values the tests draw)."""

    meaning: str
    """The table's "meaning" cell (Markdown)."""
    known_as: str = ""
    """What other voice platforms call it (Markdown)."""
    shown_default: str | None = None
    """The table's "default" cell where the default value does not say it all."""
    drawn: tuple[Any, ...] | None = None
    """The values the fuzzed calls and the hypothesis calls draw, repeated to weigh them
    (a flag: the share of ``True``); ``None``: its validator's (every choice, both
    flags, ...)."""
    shapes_the_call: bool = False
    """Drawn with the call's shape (its direction, who speaks first, the greeting), by
    hand, as the options depend on each other."""


def option(meaning: str, **details: Any) -> dict[str, Option]:
    """A policy field's metadata: its :class:`Option`."""
    return {OPTION: Option(meaning=meaning, **details)}


def option_of(field: attrs.Attribute) -> Option:
    """The :class:`Option` a policy field declares."""
    if OPTION not in field.metadata:
        raise LookupError(
            f"policy field {field.name!r} declares no option: give it "
            "metadata=option(meaning, ...), which the README's option table shows"
        )
    option: Option = field.metadata[OPTION]
    return option


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
    """How a call takes turns. Every field declares its :class:`Option`, from which the
    README's option table is written."""

    direction: Direction = attrs.field(
        default="inbound",
        validator=OneOf.of(Direction),
        metadata=option(
            '`"outbound"` calls start `ringing` and wait for the answer; inbound ones wait in '
            "`start` for the session to start",
            shapes_the_call=True,
        ),
    )
    """``outbound`` calls start ringing and wait for the callee to pick up; ``inbound``
    ones wait in ``start`` for the session to start."""

    first_speaker: Speaker = attrs.field(
        validator=OneOf.of(Speaker),
        metadata=option(
            "who speaks first once answered",
            known_as="Vapi `firstMessageMode`, Ultravox `firstSpeaker`, Retell `start_speaker`",
            shown_default='outbound `"user"`, inbound `"agent"`',
            shapes_the_call=True,
        ),
    )
    """Who speaks first once the call is answered. Default: ``user`` for outbound calls
    (wait for the callee's "Hello?"), ``agent`` for inbound ones."""

    greeting: Text | None = attrs.field(
        default=None,
        validator=_optional_text,
        metadata=option(
            "fixed greeting text, said locked",
            known_as="Vapi `firstMessage`, Retell `begin_message`",
            shown_default=(
                "required for outbound calls (or the next); inbound without either: the agent's "
                "first speech"
            ),
            shapes_the_call=True,
        ),
    )
    """Fixed greeting text, said locked. Without it (nor ``greeting_instructions``) on an
    inbound call where the agent speaks first, the agent's own first speech is the
    greeting, locked the same way."""

    greeting_instructions: Text | None = attrs.field(
        default=None,
        validator=_optional_text,
        metadata=option(
            "instructions for a generated greeting instead",
            known_as="Vapi `assistant-speaks-first-with-model-generated-message`",
            shown_default="required for outbound calls (or the previous)",
            shapes_the_call=True,
        ),
    )
    """Instructions for a generated greeting, instead of ``greeting``."""

    await_user_timeout: float | None = attrs.field(
        default=8.0,
        validator=Seconds(optional=True),
        metadata=option(
            "wait for the callee's first words this long",
            known_as="Synthflow `greeting_message_human_talk_timeout`",
            drawn=(1.5, 3.0, 6.0),
        ),
    )
    """Seconds to wait for the callee's first words before ``on_await_user_timeout``."""

    on_await_user_timeout: AwaitUserTimeoutAction = attrs.field(
        default="greet",
        validator=OneOf.of(AwaitUserTimeoutAction),
        metadata=option(
            '`"greet"` anyway or `"hang_up"`', drawn=("greet", "greet", "greet", "hang_up")
        ),
    )
    """Greet anyway, or hang up, when the callee stays silent."""

    greeting_lock: GreetingLock = attrs.field(
        default="keep_listening",
        validator=OneOf.of(GreetingLock),
        metadata=option(
            '`"keep_listening"`: heard, never interrupting, no turn committed inside; '
            '`"mute_input"`: not heard',
            known_as=(
                "Vapi `firstMessageInterruptionsEnabled=false`, Telnyx "
                "`disable_greeting_interruption`, Pipecat `FirstSpeechUserMuteStrategy`"
            ),
        ),
    )
    """``mute_input``: the caller is not heard during the greeting. ``keep_listening``: the
    caller is heard, but nothing interrupts the greeting and no turn is committed in it."""

    greeting_overlap: GreetingOverlap = attrs.field(
        default="answer_whole",
        validator=OneOf.of(GreetingOverlap),
        metadata=option(
            'speech over the greeting: answered as one whole turn after it, or `"drop"`ped'
        ),
    )
    """Speech overlapping the greeting: ``drop`` it, or answer it as one whole turn after
    the greeting (never a tail fragment)."""

    greet_on: GreetOn = attrs.field(
        default="final_transcript",
        validator=OneOf.of(GreetOn),
        metadata=option(
            "the callee's first words start the greeting on their first final transcript (about "
            "0.5 s before LiveKit's end of turn; the greeting's reply commits them, before it, "
            "and what the callee says on overlaps the greeting), or at LiveKit's "
            '`"end_of_turn"` (its endpointing and turn detector judge them, the agent\'s '
            "`on_user_turn_completed` runs on them)"
        ),
    )
    """When the callee's first words start the greeting: on their first non-empty
    ``final_transcript`` (the STT's final, about 0.5 s before LiveKit ends the turn; the
    words are committed with the greeting's reply, before it, and the rest of the
    callee's speech overlaps the greeting), or at LiveKit's ``end_of_turn`` (its
    endpointing and turn detector judge the words, and the agent's
    ``on_user_turn_completed`` runs on them, as on every turn)."""

    spill_over_window: float = attrs.field(
        default=0.5,
        validator=Seconds(optional=False),
        metadata=option(
            "with `mute_input` + `drop`: speech heard this soon after unmuting is the overlap's "
            "tail (the `spill_over` timer of `listening`'s phase `spill_over_window`; a "
            "committed turn ends it; not under a realtime model's server turn detection, which "
            "commits it itself)",
            drawn=(0.3, 0.5, 1.0),
        ),
    )
    """With ``greeting_lock="mute_input"`` and ``greeting_overlap="drop"``: speech heard
    within this many seconds of unmuting is the tail of an overlap, and is dropped."""

    interrupted_text: InterruptedText = attrs.field(
        default="spoken",
        validator=OneOf.of(InterruptedText),
        metadata=option(
            'interrupted reply keeps the `"spoken"` prefix, nothing (`"drop"`), or all (`"keep"`)',
            drawn=("spoken", "spoken", "spoken", "drop", "keep"),
        ),
    )
    """What an interrupted reply leaves in the chat context: the ``spoken`` prefix,
    nothing (``drop``), or the full text (``keep``, LiveKit's behaviour without a
    transcript synchronizer)."""

    max_tool_steps: int = attrs.field(
        default=3,
        validator=Count(1),
        metadata=option(
            "exactly this many tool rounds per user turn, then one reply without tools",
            known_as="LiveKit `max_tool_steps` (which allows N+1)",
            drawn=(1, 2, 3, 4),
        ),
    )
    """Exactly this many tool rounds per user turn (parallel calls in one step count
    once); then one final reply without tools."""

    tool_cap_fallback: Text = attrs.field(
        default="Sorry, I couldn't finish that. Could you ask me again?",
        validator=_text,
        metadata=option(
            "said if the model calls tools in the final reply",
            shown_default='"Sorry, I couldn\'t finish that…"',
        ),
    )
    """Said when the model still calls tools in the final reply."""

    mute_input_during_tools: bool = attrs.field(
        default=False,
        validator=_flag,
        metadata=option(
            "no barge-in into a tool step",
            known_as="Pipecat `cancel_on_interruption` (inverse)",
            drawn=(True, False, False, False, False),
        ),
    )
    """Mute the caller while tools run (no barge-in into a tool step)."""

    tool_reply_hold: float | None = attrs.field(
        default=3.0,
        validator=Seconds(optional=True),
        metadata=option(
            "a barge-in into a tool step: the reply to the tool output waits for the end of the "
            "caller's turn (a turn under LiveKit's `min_words` is no turn and sends it at once; "
            "any other interrupts the step, and it is never sent), at most this long after the "
            "caller stops (LiveKit's endpointing `max_delay`), then goes to the model: no model "
            "request wasted on a barge-in LiveKit honours. `None`: the step is LiveKit's alone "
            "(any turn committed while its tools run interrupts it)"
        ),
    )
    """The caller barged into a tool step: the reply to the tool output waits for LiveKit's
    decision, made when the caller's turn ends: an interruption throws it away unsent (no
    wasted model request, no tool started after it), a turn too short to interrupt
    (``min_words``) releases it at once. At most this many seconds after the caller stops
    speaking (a turn LiveKit never ends: a noise with no words), then it goes to the
    model. 3.0 is LiveKit's endpointing ``max_delay``. None leaves the tool step to
    LiveKit alone: every turn committed while the tools run interrupts the step, however
    short (LiveKit applies ``min_words`` only to its current speech)."""

    idle_timeout: float | None = attrs.field(
        default=None,
        validator=Seconds(optional=True),
        metadata=option(
            "silence before a re-prompt",
            known_as="Vapi `idleTimeoutSeconds`, Retell `reminder_trigger_ms`",
            drawn=(None, None, None, 3.0, 6.0),
        ),
    )
    """Seconds of silence while listening before a re-prompt; None disables."""

    idle_max_reprompts: int = attrs.field(
        default=2,
        validator=Count(0),
        metadata=option(
            "re-prompts before hanging up",
            known_as="Vapi `idleMessageMaxSpokenCount`, Retell `reminder_max_count`",
            drawn=(0, 1, 2),
        ),
    )
    """Re-prompts before hanging up on a silent caller."""

    idle_message: Text = attrs.field(
        default="Are you still there?",
        validator=_text,
        metadata=option(
            "the re-prompt", known_as="Vapi `idleMessages`", shown_default='"Are you still there?"'
        ),
    )
    """The re-prompt text."""

    max_call_duration: float | None = attrs.field(
        default=None,
        validator=Seconds(optional=True),
        metadata=option(
            "hang up after this many seconds",
            known_as="Vapi `maxDurationSeconds`, Retell `max_call_duration_ms`",
            drawn=(None,) * 8 + (8.0, 15.0),
        ),
    )
    """Hang up after this many seconds from the answer; None disables."""

    on_answering_machine: AnsweringMachineAction = attrs.field(
        default="hang_up",
        validator=OneOf.of(AnsweringMachineAction),
        metadata=option(
            'on an AMD machine verdict (outbound calls): `"hang_up"` or `"continue"`',
            known_as="Vapi `voicemailDetection`, Retell `voicemail_option`",
        ),
    )
    """What to do when answering-machine detection says a machine picked up (outbound
    calls: an inbound call ignores the verdict)."""

    model_reply_wait: float = attrs.field(
        default=2.0,
        validator=Seconds(optional=False),
        metadata=option(
            "realtime models: wait this long for the model's own reply (to the first words, "
            "replaced by the greeting; to tool output at the cap, adopted as the final reply)"
        ),
    )
    """Realtime models that answer on their own: seconds to wait for the model's own reply
    (to the callee's first words, replaced by the greeting; to tool output at the cap,
    adopted as the final reply) before asking for the reply."""

    response_done_wait: float = attrs.field(
        default=5.0,
        validator=Seconds(optional=False),
        metadata=option(
            "realtime models: longest wait for the model to be free (its active response done, "
            "every `response.cancel` answered) before asking it for another"
        ),
    )
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
