"""Which contexts a call can be in, state by state: what ``restore()`` lets in.

A context is refused, naming the field, when no call under the policy can hold it:

* a value of the wrong kind or out of range (:func:`turnfsm.fields.check_fields`, the
  policy's limits: ``tool_rounds <= max_tool_steps``, timers the policy starts);
* ids that contradict each other (a dropped, greeting or final speech that is not active);
* given the configuration: a state no call under the policy reaches, or a value the
  rules' actions never leave in that state. Each field of :data:`SCOPED` belongs to part
  of the call and is reset on leaving it (the greeting's ids and flags when the greeting
  ends, the tool loop's speech when its speech
  ends, the user turn's counts with the next turn); a caller the state mutes is
  silent; timers run where they are started; the final reply's flags and waits exist
  only once the tool rounds reached the cap; the realtime flags only once a realtime
  model is linked.

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
    CONVERSATION_STATES,
    LIVE_STATES,
    MODEL_STATES,
    TIMER_STATES,
    TIMERS,
    VOICE_STATES,
    TurnChart,
    TurnMachine,
    leaves_under,
    public_state,
)
from .policy import TurnPolicy
from .rules import TurnRules, input_muted

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
        ("tool_speech_id", "final_speech_id", "final_after_speech", "held_tool_reply"),
        frozenset({"speaking", "tool_loop", "ended"}),
    ),
    **dict.fromkeys(
        (
            "tool_rounds",
            "capped",
            "tool_loop_stopped",
            "final_reply_pending",
            "final_wait",
            "reprompts",
            "model_replies_to_tools",
            "handing_over",
        ),
        _CONVERSATION_AND_END,
    ),
    "end_reason": frozenset({"ended"}),
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

TOOL_ROUND_FIELDS: tuple[str, ...] = (
    "tool_rounds",
    "capped",
    "tool_loop_stopped",
    "final_reply_pending",
    "final_wait",
)
"""Fields a user turn's tool rounds set: at their defaults in the overlap phases (not
``handing_over``: a step's handover is noted wherever its end is told)."""

RUNS_IN: Mapping[str, frozenset[str]] = {
    **TIMER_STATES,
    # held only while a tool step's speech plays (its end releases the hold)
    "tool_reply_hold": frozenset({"speaking", "tool_loop"}),
}
"""The atomic states each timer can run in: inside the state that declares it
(:data:`turnfsm.machine.TIMER_STATES`), narrower where its rules say so."""

AT_THE_CAP: tuple[str, ...] = ("final_reply_pending", "final_wait", "final_after_speech")
"""Fields set only when the tool rounds reached the cap (``capped``)."""

REALTIME_TIMERS: frozenset[str] = frozenset({"model_reply", "response_done"})
"""Timers of the waits for a realtime model."""

REALTIME: tuple[str, ...] = (
    "model_replies_to_turns",
    "model_replies_to_tools",
    "pending_cancels",
    "final_wait",
    "final_after_speech",
)
"""Fields a call sets only once a realtime model is linked (``realtime_model``)."""

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
    timer_seconds = {name: getattr(policy, timer.seconds) for name, timer in TIMERS.items()}
    if never := sorted(t for t in context.timers if timer_seconds.get(t) is None):
        raise ValueError(f"TurnContext.timers has timers this policy never starts: {never}")
    if stray := sorted(context.dropped_speeches - context.active_speeches):
        raise ValueError(f"TurnContext.dropped_speeches must be active speeches: {stray}")
    for name in ("greeting_speech_id", "final_speech_id"):
        speech = getattr(context, name)
        if speech is not None and speech not in context.active_speeches:
            raise ValueError(f"TurnContext.{name} {speech!r} is not an active speech")
    _check_linked(context, policy)
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


def _check_linked(context: TurnContext, policy: TurnPolicy) -> None:
    """The fields that follow from others, whatever the state."""
    if context.capped and context.tool_rounds != policy.max_tool_steps:
        raise ValueError(
            f"TurnContext.capped is set only at the cap: tool_rounds must be "
            f"{policy.max_tool_steps}, got {context.tool_rounds}"
        )
    for name in AT_THE_CAP:
        if not context.capped and getattr(context, name) != getattr(_DEFAULTS, name):
            raise ValueError(f"TurnContext.{name} is set only once capped (capped=False)")
    if not context.realtime_model:
        for name in REALTIME:
            if getattr(context, name) != getattr(_DEFAULTS, name):
                raise ValueError(
                    f"TurnContext.{name} is set only with a realtime model (realtime_model=False)"
                )
        if waits := sorted(context.timers & REALTIME_TIMERS):
            raise ValueError(
                f"TurnContext.timers {waits} run only with a realtime model (realtime_model=False)"
            )
    if "tool_reply_hold" in context.timers and context.held_tool_reply is None:
        raise ValueError("TurnContext.timers: 'tool_reply_hold' runs only while a reply is held")
    if context.held_tool_reply is not None and (
        context.realtime_model or policy.mute_input_during_tools
    ):
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
    if state == "ended" and context.end_reason is None:
        raise ValueError("TurnContext.end_reason must say why the call ended")
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
    _check_model(context, configuration)
    if state == "greeting":
        _check_greeting_phase(context, policy, configuration)
    if state == "listening":
        _check_listening_phase(context, policy, configuration)
    for timer in context.timers:
        if phase not in RUNS_IN[timer]:
            raise ValueError(
                f"TurnContext.timers: {timer!r} does not run in {phase!r} "
                f"(only in {sorted(RUNS_IN[timer])})"
            )
    if state in LIVE_STATES and policy.max_call_duration is not None:
        if "max_duration" not in context.timers:
            raise ValueError(
                "TurnContext.timers must hold 'max_duration' while the call is live "
                "(max_call_duration is set)"
            )


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
        for name in TOOL_ROUND_FIELDS:
            if getattr(context, name) != getattr(_DEFAULTS, name):
                raise ValueError(
                    f"TurnContext.{name} is {getattr(context, name)!r} in {phase!r}, which "
                    "follows the greeting before any tool round"
                )
    if phase == "spill_over_window" and (
        not (policy.mutes_greeting and policy.greeting_overlap == "drop")
        or context.model_replies_to_turns
    ):
        raise ValueError(
            "no call under this policy is in 'spill_over_window': only with greeting_lock="
            "'mute_input' and greeting_overlap='drop', and not while a realtime model "
            "detects turns (model_replies_to_turns)"
        )
    if phase == "discarding_overlap" and (
        policy.greeting_overlap != "drop"
        or (policy.mutes_greeting and context.model_replies_to_turns)
    ):
        raise ValueError(
            "no call under this policy is in 'discarding_overlap': only with "
            "greeting_overlap='drop', and under greeting_lock='mute_input' not while a "
            "realtime model detects turns (model_replies_to_turns)"
        )
    if phase in REPLAY_PHASES and (
        not (policy.mutes_greeting and policy.greeting_overlap == "answer_whole")
        or context.realtime_model
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
    """The realtime model's region leaves ``model_free`` only once a model is linked, and
    is in ``model_cancelling`` exactly while cancels are on their way."""
    # (ended: no model's activity is left)
    model = next((leaf for leaf in configuration if leaf in MODEL_STATES), "model_free")
    if model != "model_free" and not context.realtime_model:
        raise ValueError(f"no call is in {model!r} without a realtime model (realtime_model)")
    if bool(context.pending_cancels) != (model in CANCELLING):
        raise ValueError(
            f"TurnContext.pending_cancels holds cancels exactly in {sorted(CANCELLING)}, "
            f"got {sorted(context.pending_cancels)} in {model!r}"
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
    if phase in AWAITING_MODEL and "model_free" in configuration:
        raise ValueError(f"{phase!r} waits for a busy realtime model, not 'model_free'")
