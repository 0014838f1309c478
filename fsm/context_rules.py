"""Which contexts a call can be in, state by state: what ``restore()`` lets in.

A context is refused, naming the field, when no call under the policy can hold it:

* a value of the wrong kind or out of range (:func:`turnfsm.fields.check_fields`, the
  policy's limits: ``tool_rounds <= max_tool_steps``, re-prompts only with the idle timer);
* ids that contradict each other (a dropped, greeting or final speech that is not active);
* given the configuration: a state no call under the policy reaches, or a value the
  rules' actions never leave in that state. Each field of :data:`SCOPED` belongs to part
  of the call and is reset on leaving it (the greeting's ids and flags when the greeting
  ends, the tool loop's speech when its speech
  ends, the user turn's counts with the next turn); a caller the state mutes is
  silent; the cap's region leaves ``tools_open``
  only in the conversation, and is capped only once the tool rounds reached the cap,
  its phases holding the speeches they wait for; a step hands the call over (the
  handoff's region) only in the conversation; the realtime fields, and what the model
  answers on its own (``auto_turn_replies``, ``auto_tool_replies``), only once a realtime
  model is linked. (The running timers are no field: where the call is says which run,
  :func:`~turnfsm.rules.running_timers`.)

:func:`turnfsm.testing.explore` checks every context it reaches against these rules, so a
rule that refused a context some call reaches fails the exploration tests. The rules are
the turn chart's and :class:`~turnfsm.rules.TurnRules`'; a machine from
:func:`~turnfsm.machine.build_machine` or other rules may set fields elsewhere: for them
only the checks that do not depend on the state apply (:func:`state_rules_apply`).
"""

from __future__ import annotations

from collections.abc import Mapping

from .context import TurnContext
from .fields import check_fields
from .machine import (
    CAPPED_PHASES,
    CONVERSATION_STATES,
    HELD_PHASES,
    LIVE_STATES,
    MODEL_STATES,
    REGION_STATES,
    VOICE_STATES,
    TurnChart,
    TurnMachine,
    leaves_under,
    public_state,
)
from .policy import TurnPolicy
from .rules import (
    AUTO_TOOL_REPLIES,
    AUTO_TURN_REPLIES,
    MODEL_IDLE,
    UNLINKED,
    TurnRules,
    input_muted,
)

_CONVERSATION_AND_END = CONVERSATION_STATES | {"ended"}

SILENT, SPEAKING, SPOKE_OVER_GREETING = VOICE_STATES
"""The caller's voice (its region beside the turn)."""

CANCELLING = leaves_under("model_cancelling")
"""The realtime model's states while a cancel of it is on its way."""

SCOPED: Mapping[str, frozenset[str]] = {
    **dict.fromkeys(
        (
            "first_words_item",
            "first_words_heard",
            "greeting_speech_id",
        ),
        frozenset({"greeting"}),
    ),
    **dict.fromkeys(
        ("tool_speech_id", "final_speech_id", "final_after_speech"),
        frozenset({"speaking", "tool_loop", "ended"}),
    ),
    **dict.fromkeys(("tool_rounds", "reprompts"), _CONVERSATION_AND_END),
    # before the greeting a speech's text is never committed: nothing is dropped there
    "dropped_speeches": _CONVERSATION_AND_END | {"greeting"},
}
"""Fields that hold another value than their default only in these states."""

AWAITING_MODEL = frozenset({"greeting_awaiting_model", "retry_awaiting_model"})
"""The greeting's phases that wait for a busy realtime model."""

PLAYING = frozenset({"greeting_playing", "retry_playing"})
"""The greeting's phases once its speech exists."""

REPLAY_PHASES = leaves_under("replaying_held_audio")
"""The phases of the replay of the greeting's held audio."""

OVERLAP_PHASES = REPLAY_PHASES | {"spill_over_window", "discarding_overlap"}
"""The phases of ``listening`` that follow the greeting's end before any turn."""

CAP_STATES = frozenset(REGION_STATES["tool_cap"])
"""The states of the cap's region (beside the turn while the call is live)."""

TOOLS_OPEN = REGION_STATES["tool_cap"][0]
"""The cap's region before a user turn's tool rounds reach the cap (its initial state)."""

INTERRUPTED = REGION_STATES["tool_cap"][1]
"""The cap's region once LiveKit interrupted the loop's speech (no further round)."""

AGENT_KEEPS_CALL, HANDING_OFF = REGION_STATES["handoff"]
"""The handoff's region (beside the turn while the call is live)."""

REALTIME_CAP_PHASES = frozenset(
    {"final_awaits_tool_speech", "final_awaits_model_reply", "final_awaits_model_free"}
)
"""The cap's phases that wait for a realtime model (a pipeline's final reply is asked for
at the cap, its wait for a free model left in the same step)."""

HOLDING_STATES = frozenset({"speaking", "tool_loop"})
"""The states a tool step's reply is held in: a step's speech plays (its end, or its
interruption, ends the hold)."""

REALTIME: tuple[str, ...] = (
    "pending_cancels",
    "final_after_speech",
)
"""Fields a call sets only once a realtime model is linked (the model's region has left
``model_unlinked``)."""

MODEL_ANSWERS = frozenset({AUTO_TURN_REPLIES, AUTO_TOOL_REPLIES})
"""The states of the regions of what a realtime model answers on its own, once its link
tells (or, for tool output, it is seen doing so): a linked model's only."""

_DEFAULTS = TurnContext()


def check_context(
    context: TurnContext,
    policy: TurnPolicy,
    configuration: tuple[str, ...] | None = None,
) -> None:
    """Refuse a context no call under ``policy`` can be in, in ``configuration`` when
    given (its state, then one state of each region beside it while live): see the module's rules.

    Raises:
        TypeError: a field of the wrong kind (``tool_rounds="2"``).
        ValueError: a value out of range, inconsistent, or one the state never holds
            (``capped=True`` in ``greeting``).
    """
    if not isinstance(context, TurnContext):
        raise TypeError(f"context must be a TurnContext, got {type(context).__name__}")
    check_fields(context)
    limits = {
        "tool_rounds": policy.max_tool_steps,
        # re-prompts are said only when the idle timer runs
        "reprompts": policy.idle_max_reprompts if policy.idle_timeout is not None else 0,
    }
    for name, limit in limits.items():
        if getattr(context, name) > limit:
            raise ValueError(
                f"TurnContext.{name} must be <= {limit} under this policy, "
                f"got {getattr(context, name)}"
            )
    if stray := sorted(context.dropped_speeches - context.active_speeches):
        raise ValueError(f"TurnContext.dropped_speeches must be active speeches: {stray}")
    for name in ("greeting_speech_id", "final_speech_id"):
        speech = getattr(context, name)
        if speech is not None and speech not in context.active_speeches:
            raise ValueError(f"TurnContext.{name} {speech!r} is not an active speech")
    # (a chart of one's own may name its states otherwise: no realtime check without them)
    realtime = None if configuration is None else runs_realtime_model(configuration)
    _check_linked(context, policy, realtime)
    if configuration is not None:
        _check_state(context, policy, configuration)


def state_rules_apply(machine_class: type[TurnChart], rules_class: type[TurnRules]) -> bool:
    """Whether the state rules hold for this machine and these rules: the turn chart's
    own, run by :class:`~turnfsm.rules.TurnRules` itself."""
    return machine_class is TurnMachine and rules_class is TurnRules


def reachable_states(policy: TurnPolicy) -> frozenset[str]:
    """The states a call under ``policy`` can be in: an inbound call starts in ``start``,
    an outbound one rings; the callee's first words are awaited only when the user speaks
    first and there is a greeting to say; the agent's first speech only when it greets in
    its own words (that speech is the greeting)."""
    states = {"listening", "speaking", "tool_loop", "ended"}
    states.add("ringing" if policy.direction == "outbound" else "start")
    if policy.has_greeting:
        states.add("greeting")
        if policy.first_speaker == "user":
            states.add("awaiting_user")
    if policy.greets_in_own_words:
        states |= {"awaiting_agent", "greeting"}
    return frozenset(states)


def runs_realtime_model(configuration: tuple[str, ...]) -> bool | None:
    """Whether a realtime model is linked in ``configuration`` (``None`` in ``ended``,
    where no region's state is left to tell)."""
    if configuration[0] == "ended":
        return None
    return UNLINKED not in configuration


def _check_linked(context: TurnContext, policy: TurnPolicy, realtime: bool | None) -> None:
    """The fields that follow from others, whatever the state."""
    if realtime is False:
        for name in REALTIME:
            if getattr(context, name) != getattr(_DEFAULTS, name):
                raise ValueError(
                    f"TurnContext.{name} is set only with a realtime model (not {UNLINKED!r})"
                )
    if context.held_tool_reply is not None and (realtime or policy.mute_input_during_tools):
        raise ValueError(
            "TurnContext.held_tool_reply is set only without a realtime model and with "
            "mute_input_during_tools=False"
        )
    # the callee's first words: awaited when the user speaks first, or heard while ringing
    if context.first_words_item is not None and not (
        policy.first_speaker == "user" or policy.direction == "outbound"
    ):
        raise ValueError(
            "TurnContext.first_words_item is set only on an outbound call or when the user "
            f"speaks first (first_speaker={policy.first_speaker!r})"
        )


def _check_state(context: TurnContext, policy: TurnPolicy, configuration: tuple[str, ...]) -> None:
    """The fields that depend on where the call is (the state as
    :attr:`~turnfsm.TurnController.state` reports it; the greeting's phase besides)."""
    phase = configuration[0]
    state = public_state(phase)
    if state not in reachable_states(policy):
        raise ValueError(
            f"no call under this policy is in {state!r} (direction={policy.direction!r}, "
            f"first_speaker={policy.first_speaker!r}, has_greeting={policy.has_greeting})"
        )
    for name, states in SCOPED.items():
        if state not in states and getattr(context, name) != getattr(_DEFAULTS, name):
            raise ValueError(
                f"TurnContext.{name} is {getattr(context, name)!r} in {state!r}: it is set "
                f"only in {sorted(states)}"
            )
    if input_muted(policy, {state}) and SPEAKING in configuration:
        raise ValueError(f"a muted caller is {SILENT}, not {SPEAKING}")
    if SPOKE_OVER_GREETING in configuration and not (
        state == "greeting"
        and not policy.mutes_greeting
        and policy.greeting_overlap == "answer_whole"
    ):
        raise ValueError(
            f"the caller is {SPOKE_OVER_GREETING!r} only in 'greeting', with "
            "greeting_lock='keep_listening' and greeting_overlap='answer_whole'"
        )
    if state in ("speaking", "tool_loop") and not context.active_speeches:
        raise ValueError(f"TurnContext.active_speeches must hold the speech of {state!r}")
    # a speech in flight after the greeting is the agent's turn (issue 24); without one, a
    # speech stopped before the call began may still be on its way out in 'listening'
    if state == "listening" and context.active_speeches and policy.has_greeting:
        raise ValueError(
            f"TurnContext.active_speeches must be empty in 'listening' after a greeting, "
            f"got {sorted(context.active_speeches)}"
        )
    if state != "ended":
        for name in ("tool_speech_id", "final_after_speech", "held_tool_reply"):
            speech = getattr(context, name)
            if speech is not None and speech not in context.active_speeches:
                raise ValueError(f"TurnContext.{name} {speech!r} is not an active speech")
    if problem := _regions_problem(configuration):
        raise ValueError(problem)
    _check_model(context, configuration)
    if state == "greeting":
        _check_greeting_phase(context, policy, configuration)
    if state == "listening":
        _check_listening_phase(context, policy, configuration)
    if state in LIVE_STATES:
        _check_cap_phase(context, policy, state, configuration)
    _check_hold(context, configuration)
    _check_handoff(context, configuration)


def _check_listening_phase(
    context: TurnContext, policy: TurnPolicy, configuration: tuple[str, ...]
) -> None:
    """An overlap is discarded only under ``drop``; a spill-over is awaited only under
    ``mute_input`` + ``drop``, where LiveKit commits turns (not a realtime model's
    server); the held audio is replayed only under ``mute_input`` + ``answer_whole``, on
    a pipeline; the caller's voice starting moves the spill-over window and the unheard
    replay on; all follow the greeting's end before any tool round."""
    phase = configuration[0]
    if phase in OVERLAP_PHASES:
        if context.tool_rounds:
            raise ValueError(
                f"TurnContext.tool_rounds is {context.tool_rounds!r} in {phase!r}, which "
                "follows the greeting before any tool round"
            )
        if TOOLS_OPEN not in configuration:
            raise ValueError(
                f"the cap's region is {TOOLS_OPEN} in {phase!r}, which follows the greeting "
                "before any tool round"
            )
    model_detects_turns = AUTO_TURN_REPLIES in configuration
    if phase == "spill_over_window" and (
        not (policy.mutes_greeting and policy.greeting_overlap == "drop") or model_detects_turns
    ):
        raise ValueError(
            "no call under this policy is in 'spill_over_window': only with greeting_lock="
            "'mute_input' and greeting_overlap='drop', and not while a realtime model "
            f"detects turns ({AUTO_TURN_REPLIES})"
        )
    if phase == "discarding_overlap" and (
        policy.greeting_overlap != "drop" or (policy.mutes_greeting and model_detects_turns)
    ):
        raise ValueError(
            "no call under this policy is in 'discarding_overlap': only with "
            "greeting_overlap='drop', and under greeting_lock='mute_input' not while a "
            f"realtime model detects turns ({AUTO_TURN_REPLIES})"
        )
    if phase in REPLAY_PHASES and (
        not (policy.mutes_greeting and policy.greeting_overlap == "answer_whole")
        or runs_realtime_model(configuration)
    ):
        raise ValueError(
            f"no call under this policy is in {phase!r}: only with greeting_lock="
            "'mute_input' and greeting_overlap='answer_whole', without a realtime model"
        )
    if phase in ("spill_over_window", "replay_unheard") and SPEAKING in configuration:
        raise ValueError(
            f"the caller is {SILENT} in {phase!r} (their voice starting moves it on), "
            f"not {SPEAKING}"
        )


def _check_model(context: TurnContext, configuration: tuple[str, ...]) -> None:
    """The realtime model's region is in ``model_cancelling`` exactly while cancels are on
    their way."""
    # (ended: no model's activity is left)
    model = next((leaf for leaf in configuration if leaf in MODEL_STATES), UNLINKED)
    if bool(context.pending_cancels) != (model in CANCELLING):
        raise ValueError(
            f"TurnContext.pending_cancels holds cancels exactly in {sorted(CANCELLING)}, "
            f"got {sorted(context.pending_cancels)} in {model!r}"
        )


def _regions_problem(configuration: tuple[str, ...]) -> str | None:
    """Why the regions beside the turn cannot be in their states of ``configuration``
    beside the turn's, if they cannot: the cap leaves ``tools_open``, and the handoff's
    region ``agent_keeps_call``, only in the conversation, where tool rounds are counted;
    a tool step's reply is held only in ``speaking`` and ``tool_loop``; what a model
    answers on its own is known only once a realtime model is linked (its link tells it,
    or its own replies show it)."""
    beside, state = set(configuration[1:]), public_state(configuration[0])
    if UNLINKED in beside and (answers := sorted(beside & MODEL_ANSWERS)):
        return f"{answers[0]!r} is a realtime model's, only with one linked (not {UNLINKED!r})"
    if moved := sorted(beside & CAP_STATES - {TOOLS_OPEN}):
        if state not in CONVERSATION_STATES:
            return f"the cap's region is {TOOLS_OPEN} in {state!r}, not {moved[0]!r}"
    if HANDING_OFF in beside and state not in CONVERSATION_STATES:
        return f"a step hands the call over only in the conversation, not in {state!r}"
    if not beside.isdisjoint(HELD_PHASES) and state not in HOLDING_STATES:
        return f"a tool step's reply is held only in {sorted(HOLDING_STATES)}, not in {state!r}"
    return None


def regions_possible(configuration: tuple[str, ...]) -> bool:
    """Whether the regions beside the turn can be in their states of ``configuration``
    beside the turn's (:func:`_regions_problem`)."""
    return _regions_problem(configuration) is None


def _check_hold(context: TurnContext, configuration: tuple[str, ...]) -> None:
    """The speech a tool step's reply holds is known exactly while it is held."""
    held = not HELD_PHASES.isdisjoint(configuration)
    if (context.held_tool_reply is not None) != held:
        raise ValueError(
            "TurnContext.held_tool_reply is set exactly while a tool step's reply is held "
            f"({sorted(HELD_PHASES)}), got {context.held_tool_reply!r} in {configuration!r}"
        )


def _check_handoff(context: TurnContext, configuration: tuple[str, ...]) -> None:
    """A tool loop since the handoff ran a round of this user turn: the step that handed
    over left ``tool_loop`` and the cap's region ``tools_open``, so a loop running since,
    or interrupted since, started with a counted round, and the user turn that counts
    afresh leaves ``handing_off``. (A step that started before the user turn may hand
    over after it: ``handing_off`` alone allows no round.)"""
    looped = configuration[0] == "tool_loop" or INTERRUPTED in configuration
    if HANDING_OFF in configuration and looped and not context.tool_rounds:
        where = configuration[0] if configuration[0] == "tool_loop" else INTERRUPTED
        raise ValueError(
            f"TurnContext.tool_rounds is at least 1 in {where!r} beside {HANDING_OFF!r} "
            "(a step started since the handoff), got 0"
        )


def _check_cap_phase(
    context: TurnContext, policy: TurnPolicy, state: str, configuration: tuple[str, ...]
) -> None:
    """Once capped the rounds are at the cap; a realtime model's waits exist only with
    one; the capped step's speech is known exactly while the cap waits for its end, and
    once capped the final reply's speech only while it plays."""
    (phase,) = set(configuration) & CAP_STATES
    if phase in CAPPED_PHASES and context.tool_rounds != policy.max_tool_steps:
        raise ValueError(
            f"{phase!r} follows the cap: tool_rounds must be {policy.max_tool_steps}, "
            f"got {context.tool_rounds}"
        )
    if phase in REALTIME_CAP_PHASES and not runs_realtime_model(configuration):
        raise ValueError(f"{phase!r} waits for a realtime model, not one {UNLINKED!r}")
    if (context.final_after_speech is not None) != (phase == "final_awaits_tool_speech"):
        raise ValueError(
            "TurnContext.final_after_speech is set exactly in 'final_awaits_tool_speech', "
            f"got {context.final_after_speech!r} in {phase!r}"
        )
    # the interrupted loop's turn leaves tool_loop for speaking only through listening,
    # every speech over: no earlier turn's final reply still plays there, nor the step's
    # own speech
    if phase == "tool_loop_interrupted" and state == "speaking":
        for name in ("final_speech_id", "tool_speech_id"):
            if getattr(context, name) is not None:
                raise ValueError(
                    f"TurnContext.{name} is None in 'speaking' beside 'tool_loop_interrupted' "
                    f"(reached through 'listening', every speech over), got "
                    f"{getattr(context, name)!r}"
                )
    # (an earlier turn's final reply, forgotten at the cap, may still play once it is open)
    if phase in CAPPED_PHASES and (context.final_speech_id is not None) != (
        phase == "final_reply_playing"
    ):
        raise ValueError(
            "TurnContext.final_speech_id is set, once capped, exactly in 'final_reply_playing', "
            f"got {context.final_speech_id!r} in {phase!r}"
        )


def _check_greeting_phase(
    context: TurnContext, policy: TurnPolicy, configuration: tuple[str, ...]
) -> None:
    """The greeting's speech exists exactly while it plays; it is retried only with a
    text; it waits for the model only while the model is busy (a free one ends the wait in
    the step that frees it)."""
    phase = configuration[0]
    if (context.greeting_speech_id is not None) != (phase in PLAYING):
        raise ValueError(
            f"TurnContext.greeting_speech_id is set exactly in {sorted(PLAYING)}, "
            f"got {context.greeting_speech_id!r} in {phase!r}"
        )
    if phase.startswith("retry_") and policy.greeting is None:
        raise ValueError(
            f"no call under this policy is in {phase!r}: only a greeting text is retried"
        )
    if phase in AWAITING_MODEL and not MODEL_IDLE.isdisjoint(configuration):
        raise ValueError(f"{phase!r} waits for a busy realtime model, not one in {MODEL_IDLE}")
