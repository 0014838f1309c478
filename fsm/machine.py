"""The turn machine: every state and transition of a call, declared in one chart.

The chart names its guards and actions; their code lives in
:class:`turnfsm.rules.TurnRules`, attached as a listener. Nothing here performs I/O:
actions append :mod:`turnfsm.effects` to an outbox that the controller returns.

Reading the declaration: ``event = source.to(target, cond=..., on=...)``. A state's own
transitions come first (in declaration order; the first whose guards hold wins), then
those of its parents: ``call.to(ended)`` ends the call from every state inside ``call``.
A targetless transition, ``listening.to(None, on=...)``, stays in its state without
running its exit and enter actions; declared on a parent (``conversation.to(None, ...)``)
it is bookkeeping shared by the children that declare nothing more specific. (Targetless
rather than ``to.itself(internal=True)``: python-statemachine 3.2 re-enters the state and
leaves a second state active in the other region when an internal self transition and a
transition of the other region take the same event.)

Every call begins in ``start``, before anything is live: an outbound call leaves it at
once, when the machine is built, by an eventless transition to ``ringing``, and goes live
on ``call_answered``; an inbound call waits in ``start`` for ``session_started``. Either
event picks the first live state by the policy's guards (``greeting``, ``awaiting_user``
or ``listening``), whose enter actions then run once, with the call live; building the
machine emits nothing.

A live call is five regions side by side: the ``turn``, the ``caller_voice``
(``caller_silent ⇄ caller_speaking``, and ``caller_spoke_over_greeting``), the
``tool_cap`` (``tools_open ⇄ tool_loop_interrupted``, then ``capped``: the final reply
without tools, in phases), the ``tool_reply`` (``reply_free ⇄ reply_held``: the reply
to a tool step's output held while LiveKit decides on the caller's barge-in, in phases)
and the ``handoff`` (``agent_keeps_call ⇄ handing_off``: a tool step of the user turn
handed the call to another agent, which speaks next; the cap's guard reads it).
The voice region follows voice activity on its own, so a turn's state never doubles as a
"the caller is speaking" flag, nor as "the caller spoke over the greeting"; the turn's
guards and actions that depend on it read it (``caller_is_speaking``). The cap's region
follows the user turn's tool rounds: the turn still answers each step (it cancels the
reply of a step past the cap), the cap's region says what comes after it, in its states'
enter and exit actions only (none on its transitions), so that its effects take the same
place in a step whichever region the engine tries first (:mod:`turnfsm.engine`); so does
the hold of the tool reply, whose exit decides whether the reply is sent or dropped. The
call itself is four regions: its ``line`` (connecting, then live) and beside it, from the
call's start, the realtime model's activity (``model_activity``: ``model_unlinked``
until a realtime model is linked, then ``model_free``, ``model_responding``,
``model_cancelling`` while a ``response.cancel`` is on its way): a model's response
created while the call still rings must hold the greeting as well (invariant I9). The
waits for a free model read it (``model_is_free``). Beside it, what the model answers on
its own, as its link tells, moved in the link's step: the caller's turns
(``turn_replies``: ``turn_replies_on_request``, then ``auto_turn_replies``, whose entry
pauses the model's replies where the states then active hold the pause) and tool output
(``tool_output_replies``: ``tool_replies_on_request``, then ``auto_tool_replies``, also
once the model is seen answering it); the guards and actions that depend on it read
these regions (``model_detects_turns``, ``model_answers_tool_output``). A pipeline's
three stay in their initial states.

Events that a state does not handle are ignored there on purpose; :data:`IGNORED` says
why for each (state, event) pair, and the test suite checks every pair.

Extending the machine: :func:`build_machine` declares a fresh chart (new ``State``
objects every time) and lets extensions add states, events and transitions to it, so
:data:`TurnMachine` itself is never changed. Subclassing ``TurnMachine`` with new
transitions would add them to its ``State`` objects, i.e. change ``TurnMachine``.

>>> def gave_up(chart):
...     chart["agent_gave_up"] = chart_states(chart)["speaking"].to(chart["ended"])
>>> Custom = build_machine(gave_up, name="Custom")
>>> "agent_gave_up" in handled_events(Custom)["speaking"]
True
>>> "agent_gave_up" in handled_events(TurnMachine)["speaking"]
False
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, cast

import attrs
from statemachine import State, StateChart
from statemachine.callbacks import CallbackPriority
from statemachine.transition import Transition

from .effects import TimerName
from .events import EVENTS_BY_NAME, EXPIRY_OF


class TurnChart(StateChart):
    """The engine settings every turn machine shares; :func:`build_machine` adds the chart."""

    catch_errors_as_events = False
    """An exception in an action is a bug: it must reach the caller, never be swallowed."""

    allow_event_without_transition = True
    """Events a state does not handle are ignored (see :data:`IGNORED`), never an error."""

    enable_self_transition_entries = False
    """No transition runs the exit and enter actions of the state it stays in."""

    atomic_configuration_update = True
    """The state changes once per step, after exit and before enter actions."""


@attrs.frozen
class After:
    """A timer a state declares (XState's ``after``): see :func:`after`."""

    timer: TimerName
    seconds: str
    """The policy field that gives its seconds; unset (``None``), the timer never starts."""
    while_silent: bool = False
    """Runs only while the caller is silent (stopped and started again by the voice)."""

    @property
    def event(self) -> str:
        """The event of its expiry."""
        return EXPIRY_OF[self.timer].name


def after(
    state: State,
    timer: TimerName,
    *,
    seconds: str,
    while_silent: bool = False,
) -> None:
    """Declare that ``timer`` runs in ``state``: the rules' ``start_timers`` starts it as
    the state is entered, their ``cancel_timers`` cancels it as the state is left, first
    of its exit actions (unless its own expiry leaves it: it fired); its expiry is the
    event ``<timer>_timer_expired`` (:data:`~turnfsm.events.TIMER_EVENTS`), which must
    leave the state or start the timer again: which timers run then follows from the
    configuration (:func:`~turnfsm.rules.running_timers`). A state a call is in before
    its first event cannot declare one (:func:`refuse_timers_started_before_any_event`)."""
    declared = (*timers_declared(state), After(timer, seconds, while_silent))
    state.timers = declared  # type: ignore[attr-defined]
    if len(declared) == 1:
        state.enter.add("start_timers", priority=CallbackPriority.AFTER)
        state.exit.add("cancel_timers", priority=CallbackPriority.GENERIC)


def refuse_timers_started_before_any_event(machine_class: type[TurnChart]) -> None:
    """Raise ``ValueError`` if a state a call is in before its first event declares a
    timer (which starts on entry): the machine enters it while it is built, when no effect
    can be emitted, so its ``StartTimer`` would be lost (the controller refuses it)."""
    entered, todo = set(), [state for state in machine_class.states if state.initial]
    while todo:  # the initial descent, and the eventless transitions taken from it
        state = todo.pop()
        if state.id in entered:
            continue
        entered.add(state.id)
        for transition in state.transitions:
            if transition.is_eventless:
                todo.extend(transition.targets)
        for timer in timers_declared(state):
            raise ValueError(
                f"after({state.id}, {timer.timer!r}) starts on entry, but a call is in "
                f"{state.id} before its first event (the machine enters it as it is "
                "built, when no effect can be emitted): declare it on a state entered "
                "by an event"
            )


def timers_declared(state: State) -> tuple[After, ...]:
    """The timers ``state`` declares (:func:`after`), in declaration order."""
    return getattr(state, "timers", ())


def declare_chart() -> dict[str, Any]:
    """A fresh declaration of the turn chart: its states and events, by name.

    ``call`` holds every state of a call, in four regions: its ``line``, ``start`` and
    ``ringing`` before it is live (``connecting``), then ``live``, five regions side by
    side: the ``turn`` (``awaiting_user``, ``greeting``, and ``listening ⇄ speaking ⇄
    tool_loop`` in ``conversation``), the ``caller_voice`` (``caller_silent ⇄
    caller_speaking``, and ``caller_spoke_over_greeting`` in a greeting that answers an
    overlap whole), the ``tool_cap`` (``tools_open ⇄ tool_loop_interrupted``,
    ``capped``), the ``tool_reply`` (``reply_free ⇄ reply_held``) and the ``handoff``
    (``agent_keeps_call ⇄ handing_off``); and beside the line, the realtime model's
    activity (``model_activity``) and what it answers on its own (``turn_replies``,
    ``tool_output_replies``). ``ended`` is final.
    """

    class call(State.Parallel):  # noqa: N801 - state ids are snake_case
        """The call, from its start to the hang-up: its course, and beside it, the
        realtime model's activity and what the model answers on its own."""

        class line(State.Compound):  # noqa: N801
            """The call's course: connecting, then live (whose turn it is, and beside it,
            the caller's voice)."""

            class connecting(State.Compound, exit="resume_model_replies"):  # noqa: N801
                """Before the call is live: nobody is on the line yet, and the agent must not
                talk (invariant I8, as in ``awaiting_user``)."""

                start = State(initial=True)
                """The call is not live yet: outbound calls ring at once, inbound ones wait
                here for the session to start."""

                ringing = State()
                """Outbound only: dialing, until the callee picks up."""

            class live(State.Parallel):  # noqa: N801
                """The call is live: whose turn it is, and beside it, the caller's voice,
                the cap on the user turn's tool rounds, the hold of a tool step's reply and
                whether a tool step handed the call over."""

                class turn(State.Compound):  # noqa: N801
                    """Whose turn it is, from the answer to the hang-up."""

                    awaiting_user = State(exit="resume_model_replies")
                    """Answered; waiting for the callee's first words before greeting (the agent
                    must not talk: invariant I8)."""

                    awaiting_agent = State()
                    """Inbound, the agent greets in its own words (``first_speaker="agent"``,
                    no greeting text): waiting for the first speech its code asks for (a
                    ``say`` or ``generate_reply`` in ``on_enter``), which is the greeting.
                    Nothing is held meanwhile: a caller who speaks first is answered as usual,
                    without a greeting."""

                    class greeting(  # noqa: N801
                        State.Compound,
                        enter=["begin_greeting", "pause_model_replies"],
                        exit=[
                            "unmute_after_greeting",
                            "resume_user_turns_on_hang_up",
                            "forget_greeting",
                            "resume_model_replies",
                        ],
                    ):
                        """The locked greeting: nothing the caller says interrupts it. Its phases
                        are sub-states; :attr:`TurnController.state` reports ``greeting`` in
                        each (:func:`public_state`)."""

                        class greeting_pending(State.Compound, initial=True):  # noqa: N801
                            """The greeting's speech does not exist yet: the first speech
                            created now is the greeting's, unless the agent's code made it."""

                            greeting_awaiting_model = State(initial=True)
                            """A realtime model's active response (or a cancel on its way)
                            must end before the greeting is asked for (invariant I9); a free
                            model (and every pipeline) leaves at once, in the same step."""

                            greeting_requested = State(enter="request_greeting")
                            """The greeting is asked for."""

                        greeting_playing = State()
                        """The greeting's speech exists, locked, until it ends."""

                        class greeting_retry(State.Compound):  # noqa: N801
                            """The greeting's start was refused or failed: its text is said once
                            more, locked; a second failure ends the call."""

                            class retry_pending(State.Compound, initial=True):  # noqa: N801
                                """The retry's speech does not exist yet."""

                                retry_awaiting_model = State(initial=True)
                                retry_requested = State(enter="say_greeting_locked")

                            retry_playing = State()

                    class conversation(State.Compound):  # noqa: N801
                        """Turns after the greeting."""

                        class listening(State.Compound, initial=True):  # noqa: N801
                            """The caller's turn. What is left of the greeting's overlap is a
                            phase of it; :attr:`TurnController.state` reports ``listening`` in
                            each (:func:`public_state`)."""

                            listening_open = State(initial=True)
                            """Nothing of the greeting's overlap is left to wait for."""

                            spill_over_window = State()
                            """Just after a greeting that muted the input and drops an overlap
                            (``mute_input`` + ``drop``), for ``spill_over_window`` seconds
                            (its ``spill_over`` timer), until a turn is committed: speech
                            that starts now is the tail of an overlap the muted input missed.
                            Not while a realtime model's server detects turns: it commits
                            the tail before anything could hold it."""

                            discarding_overlap = State(exit="stop_discarding_overlap")
                            """Speech that overlapped the greeting (``keep_listening``), or
                            spilled over its end (``mute_input``), goes on: user turns are held
                            until it ends, and what it said is discarded (``drop``)."""

                            class replaying_held_audio(  # noqa: N801
                                State.Compound,
                                enter="hold_user_turns_through_the_replay",
                                exit="resume_user_turns_after_the_replay",
                            ):
                                """The caller's audio held over the greeting (``mute_input`` +
                                ``answer_whole``) is being replayed: user turns are held until
                                its end (the unmute's outcome), so that it becomes one turn."""

                                replay_unheard = State(initial=True)
                                """No voice of the caller heard in the replay yet."""

                                replay_heard_caller = State()
                                """The caller's voice was heard in the replay: there is a turn
                                to commit at its end."""

                        speaking = State()
                        """The agent's turn: a reply is being generated or played."""

                        tool_loop = State(enter="mute_for_tools", exit="unmute_after_tools")
                        """The reply runs a tool step; capped at ``max_tool_steps`` per user
                        turn."""

                class caller_voice(State.Compound):  # noqa: N801
                    """The caller's voice, as the unmuted input tells it: speech the muted
                    input cannot hear is neither started nor ended."""

                    caller_silent = State(initial=True)
                    caller_speaking = State()
                    caller_spoke_over_greeting = State()
                    """Silent, after speech that ended in the greeting that keeps listening
                    and answers an overlap whole: the greeting's end commits what they said
                    as one turn. Silent again once the greeting is left."""

                class tool_cap(State.Compound):  # noqa: N801
                    """The user turn's tool rounds against ``max_tool_steps``: open until a
                    step ends the last round, then capped (one final reply without tools)
                    until the next user turn. The rounds themselves are counted in the
                    context (``tool_rounds``), where the turn's rules read them."""

                    tools_open = State(initial=True, enter="forget_capped_step_speech")
                    """Tool rounds are let through, up to the cap."""

                    tool_loop_interrupted = State()
                    """LiveKit interrupted the speech whose reply runs the tool step: the
                    running step's output is not answered, and its end caps nothing."""

                    class capped(State.Compound, enter="forget_earlier_final_reply"):  # noqa: N801
                        """The user turn's tool rounds reached the cap: every further round is
                        refused, and one final reply without tools is said."""

                        class final_reply_due(  # noqa: N801
                            State.Compound,
                            initial=True,
                            enter="forbid_tools_for_the_final_reply",
                            exit="allow_tools_after_the_final_reply",
                        ):
                            """The final reply is still to come, or plays: a realtime model
                            has its tools forbidden (its session's tool choice) throughout."""

                            final_awaits_tool_speech = State(enter="note_capped_step_speech")
                            """A realtime model: the capped step's speech still plays; the
                            final reply is asked for after its end, unless the model's own
                            answer to the step's output comes first (adopted)."""

                            final_awaits_model_reply = State()
                            """A realtime model that answers tool output itself: a bounded
                            wait for that answer, adopted as the final reply."""

                            final_awaits_model_free = State(initial=True)
                            """The final reply is asked for once the model is free (invariant
                            I9); a free model (and every pipeline) leaves at once, in the
                            same step."""

                            final_reply_asked = State(enter="ask_final_reply")
                            """The final reply without tools is asked for; its speech does
                            not exist yet."""

                            final_reply_awaited = State(enter="forget_capped_step_speech")
                            """The next speech created is the final reply, without asking:
                            the model's own answer was adopted, or LiveKit declined the turn
                            that the final reply's speech answered (stopped, unplayed)."""

                            final_reply_playing = State(enter="note_final_speech")
                            """The final reply's speech exists (``final_speech_id``)."""

                        final_reply_over = State()
                        """The final reply ended: tools are allowed again, rounds still
                        refused until the next user turn."""

                class tool_reply(State.Compound):  # noqa: N801
                    """The reply to a tool step's output, held while LiveKit decides on the
                    caller's barge-in into the step: LiveKit decides when their turn ends,
                    seconds after the tool may have returned and the reply been asked for,
                    so an interruption throws away no model request. Its effects are its
                    states' enter and exit actions only (none on its transitions), as the
                    cap's."""

                    # (declared in this order, the hold and its timed phase first, for
                    # python-statemachine's document order, which numbers a state by its
                    # place among its siblings plus its parent's number: states with equal
                    # numbers exit in the order their regions are tried, which differs
                    # between the engines; these numbers match no state of the turn whose
                    # exit actions can run in the same step: tests/core/test_engine.py)
                    class reply_held(  # noqa: N801
                        State.Compound, enter="hold_tool_reply", exit="release_tool_reply"
                    ):
                        """The reply to the step's output waits (``HoldToolReply``) until LiveKit
                        decides: it commits the turn, interrupting the step's speech (the reply
                        is dropped), or commits it without that, declines it, or a turn too
                        short to interrupt ends (the reply is sent); the way out decides
                        (``release_tool_reply``)."""

                        held_after_caller_stops = State()
                        """LiveKit decides within its end-of-turn delay: the hold waits at most
                        ``tool_reply_hold`` seconds for it, then sends the reply."""

                        held_while_caller_speaks = State(initial=True)
                        """Untimed: LiveKit waits for the caller's silence too."""

                    reply_free = State(initial=True)
                    """No reply is held: LiveKit asks for a step's reply as its tools return."""

                class handoff(State.Compound):  # noqa: N801
                    """Whether a tool step of the user turn handed the call to another agent
                    (LiveKit's agent handoff: a tool returned the next agent, the step's
                    ``has_agent_handoff``), until the next user turn. Its states have no
                    actions: the cap's guard reads it (``caps_the_tool_loop``)."""

                    agent_keeps_call = State(initial=True)
                    """No step of the user turn handed the call over."""

                    handing_off = State()
                    """A step handed the call over: the outgoing agent, draining, says nothing
                    more (LiveKit refuses its new speech), and the new agent speaks next, so
                    the cap asks for no final reply."""

        class model_activity(State.Compound):  # noqa: N801
            """Beside the call's course, from its start: what the realtime model is doing,
            as its link reports it (``response.created``, ``response.done``, a
            ``response.cancel`` and its answer). A request to the model waits until it is
            free (invariant I9). A pipeline, and a call before the model's link, stays in
            ``model_unlinked``, where no model event is taken: whether the call runs a
            realtime model is this region's state (``runs_realtime_model``)."""

            model_unlinked = State(initial=True)
            """No realtime model is linked: a pipeline (its LLM is asked, never busy in
            the sense of a realtime response), or a realtime model not told yet."""

            model_free = State()
            """No response of the model is active and no cancel of it is on its way: a
            request now is neither refused nor cut."""

            model_responding = State()
            """A response of the model is active: it refuses another request until done."""

            class model_cancelling(State.Compound, exit="forget_cancels"):  # noqa: N801
                """A ``response.cancel`` is on its way (``TurnContext.pending_cancels``
                holds each by id, until its answer): a request now could meet a cancel
                meant for another response, and be cut by it."""

                cancelling_active = State(initial=True)
                """A response of the model is active too."""

                cancelling_idle = State()
                """No response of the model is active: only the answers are awaited."""

        # (declared after the model's activity: python-statemachine numbers a state by its
        # place among its siblings plus its parent's number, and states of equal numbers
        # exit in the order their regions are tried (see tool_reply); declared before it,
        # these would renumber the model's states, model_cancelling's exit action among
        # them; they have no exit actions of their own)
        class turn_replies(State.Compound):  # noqa: N801
            """Beside the model's activity: who asks for the reply to a committed user
            turn, as the model's link tells (``RealtimeModelLinked.replies_to_turns``).
            Only the link moves it: a pipeline, and a call before the link, stays in
            ``turn_replies_on_request``."""

            turn_replies_on_request = State(initial=True)
            """LiveKit asks for the reply to each user turn: a pipeline's LLM, or a
            realtime model whose server detects no turns or creates no response for them."""

            auto_turn_replies = State(enter="pause_model_replies")
            """The realtime model's server detects the caller's turns and answers each as
            it commits it (OpenAI Realtime's ``turn_detection.create_response``, LiveKit's
            ``turn_detection`` capability): only a shut input gate holds its turns, and its
            own replies are paused by the states that hold the pause (entered there, this
            state pauses them)."""

        class tool_output_replies(State.Compound):  # noqa: N801
            """Beside the model's activity: who asks for the reply to a tool step's
            output, as the model's link tells (``replies_to_tool_output``) or as the model
            is seen doing."""

            tool_replies_on_request = State(initial=True)
            """LiveKit asks for the reply to tool output: a pipeline, or a realtime model
            not known to answer it on its own."""

            auto_tool_replies = State()
            """The realtime model answers tool output on its own (LiveKit's
            ``auto_tool_reply_generation``): told by the link, or seen once answering it in
            the conversation. The capped final reply waits a while for that answer."""

    ended = State(final=True)
    """The call is over; only clean-up effects are emitted on the way in (the exit
    actions of the states left: their timers cancelled, the input released; and the
    ``EndCall`` of the transition in)."""

    # the compound classes become States when declared: name them as such for the checker
    in_call, connecting = cast(State, call), cast(State, call.line.connecting)
    start, ringing = call.line.connecting.start, call.line.connecting.ringing
    turn = cast(State, call.line.live.turn)
    awaiting_user = call.line.live.turn.awaiting_user
    greeting = cast(State, call.line.live.turn.greeting)
    greeting_pending = cast(State, call.line.live.turn.greeting.greeting_pending)
    greeting_awaiting_model, greeting_requested, greeting_playing = (
        call.line.live.turn.greeting.greeting_pending.greeting_awaiting_model,
        call.line.live.turn.greeting.greeting_pending.greeting_requested,
        call.line.live.turn.greeting.greeting_playing,
    )
    greeting_retry = cast(State, call.line.live.turn.greeting.greeting_retry)
    retry_pending = cast(State, call.line.live.turn.greeting.greeting_retry.retry_pending)
    retry_awaiting_model, retry_requested, retry_playing = (
        call.line.live.turn.greeting.greeting_retry.retry_pending.retry_awaiting_model,
        call.line.live.turn.greeting.greeting_retry.retry_pending.retry_requested,
        call.line.live.turn.greeting.greeting_retry.retry_playing,
    )
    awaiting_agent = call.line.live.turn.awaiting_agent
    conversation = cast(State, call.line.live.turn.conversation)
    listening = cast(State, call.line.live.turn.conversation.listening)
    listening_open, spill_over_window, discarding_overlap = (
        call.line.live.turn.conversation.listening.listening_open,
        call.line.live.turn.conversation.listening.spill_over_window,
        call.line.live.turn.conversation.listening.discarding_overlap,
    )
    replaying_held_audio = cast(
        State, call.line.live.turn.conversation.listening.replaying_held_audio
    )
    replay_unheard, replay_heard_caller = (
        call.line.live.turn.conversation.listening.replaying_held_audio.replay_unheard,
        call.line.live.turn.conversation.listening.replaying_held_audio.replay_heard_caller,
    )
    speaking, tool_loop = (
        call.line.live.turn.conversation.speaking,
        call.line.live.turn.conversation.tool_loop,
    )
    caller_silent, caller_speaking, caller_spoke_over_greeting = (
        call.line.live.caller_voice.caller_silent,
        call.line.live.caller_voice.caller_speaking,
        call.line.live.caller_voice.caller_spoke_over_greeting,
    )
    tools_open, tool_loop_interrupted = (
        call.line.live.tool_cap.tools_open,
        call.line.live.tool_cap.tool_loop_interrupted,
    )
    capped = cast(State, call.line.live.tool_cap.capped)
    due = call.line.live.tool_cap.capped.final_reply_due
    final_awaits_tool_speech, final_awaits_model_reply, final_awaits_model_free = (
        due.final_awaits_tool_speech,
        due.final_awaits_model_reply,
        due.final_awaits_model_free,
    )
    final_reply_asked, final_reply_awaited, final_reply_playing = (
        due.final_reply_asked,
        due.final_reply_awaited,
        due.final_reply_playing,
    )
    final_reply_over = call.line.live.tool_cap.capped.final_reply_over
    reply_free = call.line.live.tool_reply.reply_free
    reply_held = cast(State, call.line.live.tool_reply.reply_held)
    held_while_caller_speaks, held_after_caller_stops = (
        call.line.live.tool_reply.reply_held.held_while_caller_speaks,
        call.line.live.tool_reply.reply_held.held_after_caller_stops,
    )
    agent_keeps_call, handing_off = (
        call.line.live.handoff.agent_keeps_call,
        call.line.live.handoff.handing_off,
    )
    model_unlinked, model_free, model_responding = (
        call.model_activity.model_unlinked,
        call.model_activity.model_free,
        call.model_activity.model_responding,
    )
    model_cancelling = cast(State, call.model_activity.model_cancelling)
    cancelling_active, cancelling_idle = (
        call.model_activity.model_cancelling.cancelling_active,
        call.model_activity.model_cancelling.cancelling_idle,
    )
    turn_replies_on_request, auto_turn_replies = (
        call.turn_replies.turn_replies_on_request,
        call.turn_replies.auto_turn_replies,
    )
    tool_replies_on_request, auto_tool_replies = (
        call.tool_output_replies.tool_replies_on_request,
        call.tool_output_replies.auto_tool_replies,
    )

    # Timers, declared per state (XState's ``after``): started as the state is entered
    # (one ``while_silent`` only while the caller is silent: stopped when they speak,
    # started again when they stop), cancelled as it is left; each expires as an event of
    # its own, ``<timer>_timer_expired``, taken only while the timer runs, that leaves
    # the state or starts the timer again (so the configuration says which run).
    after(turn, "max_duration", seconds="max_call_duration")
    after(awaiting_user, "await_user", seconds="await_user_timeout", while_silent=True)
    after(listening, "idle", seconds="idle_timeout", while_silent=True)
    after(spill_over_window, "spill_over", seconds="spill_over_window")
    after(greeting_awaiting_model, "response_done", seconds="response_done_wait")
    after(retry_awaiting_model, "response_done", seconds="response_done_wait")
    after(final_awaits_model_reply, "model_reply", seconds="model_reply_wait")
    after(final_awaits_model_free, "response_done", seconds="response_done_wait")
    after(held_after_caller_stops, "tool_reply_hold", seconds="tool_reply_hold")

    # outbound calls ring at once (eventless); inbound ones go live with their session,
    # in the state the policy picks (first match wins)
    start.to(ringing, cond="is_outbound")

    session_started = (
        start.to(awaiting_agent, cond="greets_in_own_words")
        | start.to(greeting, cond="agent_speaks_first")
        | start.to(awaiting_user, cond="has_greeting")
        | start.to(listening)
    )

    call_answered = ringing.to(greeting, cond="agent_speaks_first") | ringing.to(awaiting_user)

    def call_wide(on: str | list[str], regions: tuple[State, State] = (connecting, turn)) -> Any:
        """Bookkeeping in every state of the call: targetless, on the states of its line
        but not the regions beside them (the caller's voice, the model's regions).
        (Declared on ``call`` itself, it would be a candidate in those regions too, and
        its actions would run more than once, beside a turn's transition.)"""
        before_live, live_turn = regions
        return before_live.to(None, on=on) | live_turn.to(None, on=on)

    call_ended = in_call.to(ended, on="end_call")

    # The caller's voice follows the voice activity the unmuted input reports; muting the
    # input silences it (eventless: no end of speech comes through a muted input). Speech
    # that ends in the greeting that answers an overlap whole is an overlap its end
    # commits; once the greeting is left, that silence is plain (eventless: after the step
    # that leaves it, whose actions have read it).
    user_speech_started = caller_speaking.from_(
        caller_silent, caller_spoke_over_greeting, unless="input_is_muted"
    )
    user_speech_ended = caller_speaking.to(
        caller_spoke_over_greeting,
        cond=["answers_whole_overlap", "in_greeting"],
        unless="mutes_greeting",
    ) | caller_speaking.to(caller_silent)
    caller_speaking.to(caller_silent, cond="input_is_muted")
    caller_spoke_over_greeting.to(caller_silent, unless="in_greeting")

    # what the turn makes of it
    user_speech_started |= (
        awaiting_user.to(None, on="stop_silence_timers")
        | spill_over_window.to(discarding_overlap, on=["stop_silence_timers", "hold_spill_over"])
        | replay_unheard.to(replay_heard_caller, on="stop_silence_timers")
        | listening.to(None, on="stop_silence_timers")
        # a barge-in into a tool step: its reply waits for LiveKit's decision, untimed
        # while the caller speaks
        | reply_free.to(
            reply_held,
            cond=["holds_tool_replies", "runs_a_tool_step", "has_tool_step_speech"],
            unless="runs_realtime_model",
        )
        | held_after_caller_stops.to(held_while_caller_speaks)
    )

    user_speech_ended |= (
        awaiting_user.to(None, on="start_silence_timers")
        # the overlap is over: discarded as its phase is left
        | discarding_overlap.to(listening_open, on="start_silence_timers")
        | listening.to(None, on="start_silence_timers")
        | held_while_caller_speaks.to(held_after_caller_stops)
    )

    user_turn_committed = (
        ringing.to(greeting, on=["note_first_words", "note_user_turn"])
        | awaiting_user.to(greeting, on=["note_first_words", "note_user_turn"])
        # the caller spoke before the agent greeted: the call goes on without a greeting
        | awaiting_agent.to(listening, on="note_user_turn")
        | greeting.to(None, cond="drops_overlap", unless="is_first_words", on="reject_user_turn")
        # a turn ends the spill-over window: what starts after it is new speech
        | spill_over_window.to(listening_open, on="note_user_turn")
        | conversation.to(None, on="note_user_turn")
        # a user turn opens a fresh count of tool rounds
        | tools_open.from_(tool_loop_interrupted, capped)
        # a reply still held: LiveKit committed the turn without interrupting its speech
        | reply_held.to(reply_free)
        # the new agent's user turn: the call is its own
        | handing_off.to(agent_keeps_call)
    )

    # LiveKit's end of the caller's turn, before it commits it: a turn too short to
    # interrupt (its min_words) over a held reply's speech is no turn, whether the step's
    # tools still run or LiveKit asks for their reply; the reply goes on at once. A longer
    # one LiveKit commits, interrupting that speech itself (which drops the reply).
    user_turn_ended = conversation.to(
        None, cond=["tool_reply_is_held", "is_backchannel"], on="decline_backchannel"
    ) | reply_held.to(reply_free, cond="is_backchannel")

    # greet_on="final_transcript": the callee's first words start the greeting as soon as
    # the STT has them, about 0.5 s before LiveKit's end of turn would commit them (the
    # greeting's reply commits them; a realtime model's server commits them itself)
    user_transcript = awaiting_user.to(
        greeting,
        cond=["greets_on_final_transcript", "has_final_words"],
        unless="runs_realtime_model",
        on=["note_first_words_heard", "note_user_turn"],
    )

    agent_speech_created = (
        connecting.to(None, on="stop_early_speech")
        | awaiting_user.to(None, on="stop_early_speech")
        # the agent's own first speech is the greeting; LiveKit's reply (to a caller who
        # spoke first) is not, and starts the conversation
        | awaiting_agent.to(greeting_playing, cond="from_agent_code", on="lock_greeting")
        | awaiting_agent.to(speaking, on="note_speech")
        # until the greeting's speech exists: the agent's own speech (a filler said in its
        # turn hook) is not the greeting and must not come before it: stopped before it
        # plays; any other is the greeting's (LiveKit's reply carrying it, turnfsm's own
        # say), locked, and nothing more is asked for
        | greeting_pending.to(None, cond="from_agent_code", on="stop_agent_speech_before_greeting")
        | retry_pending.to(None, cond="from_agent_code", on="stop_agent_speech_before_greeting")
        | greeting_playing.from_(greeting_pending, on="lock_greeting")
        | retry_playing.from_(retry_pending, on="lock_greeting")
        # any other speech (the agent's own reply after a refused greeting was said again,
        # a filler once the greeting's speech exists) plays after the greeting: noted, so the
        # conversation starts in the agent's turn
        | greeting.to(None, on="note_speech")
        | listening.to(speaking, on="note_speech")
        | conversation.to(None, on="note_speech")
        # the final reply asked for (or awaited) is the next speech created
        | final_reply_playing.from_(final_reply_asked, final_reply_awaited)
    )

    def leave_greeting(
        cond: list[str],
        target: State = listening,
        unless: str | None = None,
        before: str | None = None,
        greeting: State = greeting,
    ) -> Any:
        """The greeting's speech ended: it is the caller's turn, or the agent's while a
        speech made in the greeting is still in flight. A muted input is unmuted by the
        greeting's exit (its held audio replayed under ``answer_whole``); user turns held
        by the greeting that keeps listening are resumed (``before``), or go on being held
        while the overlap it discards goes on."""
        return greeting.to(
            target,
            cond=["is_greeting_speech", *cond],
            unless=unless,
            before=before,
            on="note_speech_end",
        )

    speech_ended = ["note_speech_end", "say_tool_fallback_if_final_reply_silent"]
    agents_turn = "another_speech_in_flight"
    committing = "resume_user_turns_committing_a_finished_overlap"
    agent_speech_ended = (
        # the greeting muted the input: held audio replayed through held user turns (one
        # turn; not on a realtime model, whose server commits the replayed audio itself),
        # or a spill-over's tail awaited, to be discarded (where LiveKit commits turns: a
        # realtime model's server commits the tail before anything could hold it)
        leave_greeting(["mutes_greeting", agents_turn], speaking)
        | leave_greeting(
            ["mutes_greeting", "answers_whole_overlap"],
            replaying_held_audio,
            unless="runs_realtime_model",
        )
        | leave_greeting(
            ["mutes_greeting", "drops_overlap"], spill_over_window, unless="model_detects_turns"
        )
        | leave_greeting(["mutes_greeting"])
        # the greeting kept listening: its held turns resumed, an overlap answered whole
        # (committed now if it is over), or dropped (once the caller stops, if they speak)
        | leave_greeting(["answers_whole_overlap", agents_turn], speaking, before=committing)
        | leave_greeting(["answers_whole_overlap"], before=committing)
        | leave_greeting([agents_turn], speaking, before="clear_and_resume_user_turns")
        | leave_greeting(["caller_is_speaking"], discarding_overlap)
        | leave_greeting([], before="clear_and_resume_user_turns")
        | speaking.to(listening, cond="is_last_active_speech", on=speech_ended)
        | tool_loop.to(listening, cond="is_last_active_speech", on=speech_ended)
        | call_wide(on=speech_ended)
        # the capped step's speech is over: the final reply is asked for (a realtime model
        # that answers tool output itself is given a while to answer first)
        | final_awaits_tool_speech.to(
            final_awaits_model_reply, cond=["is_capped_step_speech", "model_answers_tool_output"]
        )
        | final_awaits_tool_speech.to(final_awaits_model_free, cond="is_capped_step_speech")
        | final_reply_playing.to(final_reply_over, cond="is_final_reply_speech")
        # the held reply's speech is over: its reply will never be asked for
        | reply_held.to(reply_free, cond="is_held_tool_reply")
    )

    # LiveKit will not answer the caller (its min_words over a tool step, a false
    # interruption, a rejected or stopped turn): the reply it prepared for the turn, which
    # it never plays nor ends, is stopped and forgotten as if it had ended
    # (and a reply to tool output held for LiveKit's decision goes to the model)
    user_turn_declined = (
        listening.from_(
            speaking,
            tool_loop,
            cond=["prepared_reply_in_flight", "only_the_prepared_reply_in_flight"],
            on="forget_prepared_reply",
        )
        | conversation.to(None, cond="prepared_reply_in_flight", on="forget_prepared_reply")
        | reply_held.to(reply_free)
        # the final reply's speech was the one LiveKit prepared: the next speech is
        | final_reply_playing.to(
            final_reply_awaited, cond=["prepared_reply_in_flight", "prepares_the_final_reply"]
        )
    )

    assistant_message_committed = greeting.to(
        None, cond="needs_drop", on="drop_unspoken_text"
    ) | conversation.to(None, cond="needs_drop", on="drop_unspoken_text")

    tool_step_started = (
        listening.to(tool_loop, on="count_tool_round")
        | speaking.to(tool_loop, on="count_tool_round")
        | tool_loop.to(None, on="count_tool_round")
        # a step that starts while the caller speaks: held as if they began now
        | reply_free.to(
            reply_held,
            cond=[
                "holds_tool_replies",
                "in_conversation",
                "caller_is_speaking",
                "step_has_a_speech",
            ],
            unless="runs_realtime_model",
        )
    )

    # (playback is traced only; the state follows creation)
    agent_speech_started = conversation.to(None, on="note_tool_reply_plays")

    # the step's output goes unanswered past the cap, or once its speech was interrupted
    tool_step_finished = (
        tool_loop.to(speaking, cond="tool_loop_must_stop", on="cancel_tool_reply")
        | tool_loop.to(speaking, cond="step_speech_interrupted", on="cancel_tool_reply")
        | tool_loop.to(speaking, on="note_tool_reply_due")
        | conversation.to(None, cond="tool_loop_must_stop", on="cancel_tool_reply")
        | conversation.to(None, cond="step_speech_interrupted", on="cancel_tool_reply")
        | conversation.to(None, on="note_tool_reply_due")
        # the step ends the last round: the final reply without tools, asked for once the
        # model is free, or (a realtime model) once the step's speech is over, after the
        # model's own answer to the step's output if it gives one (adopted)
        | tools_open.to(
            final_awaits_tool_speech,
            cond=["caps_the_tool_loop", "runs_realtime_model", "is_active_speech"],
        )
        | tools_open.to(
            final_awaits_model_reply, cond=["caps_the_tool_loop", "model_answers_tool_output"]
        )
        | tools_open.to(final_awaits_model_free, cond="caps_the_tool_loop")
        # an interrupted loop's step ends: the next one counts again
        | tool_loop_interrupted.to(tools_open)
        # the outgoing agent drains: LiveKit hands over only once its speeches are done,
        # and takes no user turn meanwhile, so nothing would decide a held reply: sent
        | reply_held.to(reply_free, cond="hands_over")
        # a step of the user turn hands the call over (where tool rounds are counted)
        | agent_keeps_call.to(handing_off, cond=["hands_over", "in_conversation"])
    )

    interrupted = "note_speech_interrupted"
    agent_speech_interrupted = (
        speaking.to(None, on=interrupted)
        | tool_loop.to(None, on=interrupted)
        # LiveKit interrupted the speech running the tool step (it stopped the speech
        # itself): no further round, the step's output is not answered
        | tools_open.to(tool_loop_interrupted, cond=["runs_a_tool_step", "is_tool_step_speech"])
        # LiveKit interrupted the held reply's speech: the reply is never asked for
        | reply_held.to(reply_free, cond="is_held_tool_reply")
    )

    # The greeting did not start (its start refused or failed, before its speech exists
    # or naming it): said once more, locked, if it has a text; a greeting turnfsm asks
    # for (a text or instructions) that fails twice, or has no text, ends the call.
    not_started, names_it = "greeting_start_not_done", "names_the_greeting_speech"
    effect_outcome = (
        # the held audio is replayed: user turns are resumed as its phase is left
        replaying_held_audio.to(listening_open, cond="is_unmute_outcome")
        # the interrupt did not happen: the loop goes on and its reply is spoken
        | tool_loop_interrupted.to(tools_open, cond=["runs_a_tool_step", "interrupt_not_done"])
        # the adapter did not hold the reply (LiveKit would not interrupt the speech, or it
        # is gone): nothing waits for a release
        | reply_held.to(reply_free, cond="tool_reply_hold_not_done")
        | greeting_retry.from_(
            greeting_awaiting_model,
            greeting_requested,
            cond=[not_started, "has_greeting_text"],
            on="forget_greeting_speech",
        )
        | greeting_playing.to(
            greeting_retry,
            cond=[not_started, names_it, "has_greeting_text"],
            on="forget_greeting_speech",
        )
        | ended.from_(
            greeting_awaiting_model,
            greeting_requested,
            retry_awaiting_model,
            retry_requested,
            cond=["has_greeting", not_started],
            on="end_call_greeting_failed",
        )
        | ended.from_(
            greeting_playing,
            retry_playing,
            cond=["has_greeting", not_started, names_it],
            on="end_call_greeting_failed",
        )
        # the retry's own say (a realtime model's refusal of its response.create comes
        # after LiveKit made the speech, and the machine locked it)
        | ended.from_(
            retry_awaiting_model,
            retry_requested,
            cond=["has_greeting", "greeting_retry_not_done"],
            on="end_call_greeting_failed",
        )
        | retry_playing.to(
            ended,
            cond=["has_greeting", "greeting_retry_not_done", names_it],
            on="end_call_greeting_failed",
        )
    )

    await_user_timer_expired = awaiting_user.to(greeting, cond="greets_silent_callee") | (
        awaiting_user.to(ended, on="end_call_no_answer")
    )

    idle_timer_expired = listening.to(None, cond="can_reprompt", on="reprompt") | listening.to(
        ended, on="end_call_idle"
    )

    # from every state of the turn (declared on each part of it, not on ``turn``: the
    # overview then draws the turn without a box around it)
    max_duration_timer_expired = ended.from_(
        awaiting_user, awaiting_agent, greeting, conversation, on="end_call_max_duration"
    )

    # answering-machine detection runs on the calls the agent places
    answering_machine_detected = in_call.to(
        ended,
        cond=["is_outbound", "machine_answered", "hangs_up_on_machine"],
        on="end_call_answering_machine",
    )

    session_error = in_call.to(ended, unless="error_is_recoverable", on="end_call_session_error")

    # LiveKit's interruption settings, a fact of the session (told once, as it starts)
    interruption_settings = call_wide(on="note_interruption_settings")

    # Realtime models (RealtimeLink): what the model does on its own, and the waits for it.
    # The model's events are taken once a realtime model is linked (runs_realtime_model):
    # a pipeline has no such model, and one told of it anyway changes nothing. The link
    # tells, in one step, each region what the model answers on its own. (Told once,
    # before the call starts; told again, it changes nothing either.)
    realtime_model_linked = (
        model_unlinked.to(model_free)
        | turn_replies_on_request.to(
            auto_turn_replies, cond="link_answers_turns", unless="runs_realtime_model"
        )
        | tool_replies_on_request.to(
            auto_tool_replies, cond="link_answers_tool_output", unless="runs_realtime_model"
        )
    )

    # the model's activity, in its own region: a response active, cancels on their way
    # (each noted by id: only the answer to a cancel the machine took frees the model)
    model_response_created = model_free.to(model_responding) | cancelling_idle.to(
        cancelling_active
    )
    model_cancel_sent = (
        model_free.to(cancelling_idle, on="note_cancel_sent")
        | model_responding.to(cancelling_active, on="note_cancel_sent")
        | model_cancelling.to(None, on="note_cancel_sent")
    )

    # the greeting and the capped final reply are asked for once the model is free: at
    # once on a pipeline or with a free model (eventless: in the step that enters the
    # wait), else in the step that frees it (its response done, its last cancel answered)
    greeting_awaiting_model.to(greeting_requested, cond="model_is_free")
    retry_awaiting_model.to(retry_requested, cond="model_is_free")
    final_awaits_model_free.to(final_reply_asked, cond="model_is_free")

    model_response_done = model_responding.to(model_free) | cancelling_active.to(cancelling_idle)

    # (leaving model_cancelling, its exit forgets the cancels: the last one is answered)
    model_cancel_answered = (
        cancelling_active.to(model_responding, cond="last_cancel_answered")
        | cancelling_idle.to(model_free, cond="last_cancel_answered")
        | model_cancelling.to(None, unless="last_cancel_answered", on="note_cancel_answered")
    )

    # the model's own reply: never before nor in the greeting (the greeting replaces it);
    # after tool output, adopted as the final reply while the cap awaits it (the turn lets
    # it through), suppressed as a second one, or let through
    model_reply_started = (
        connecting.to(None, cond="runs_realtime_model", on="suppress_model_reply")
        | awaiting_user.to(None, cond="runs_realtime_model", on="suppress_model_reply")
        | greeting.to(None, cond="runs_realtime_model", on="suppress_model_reply")
        | conversation.to(
            None, cond=["runs_realtime_model", "is_unwanted_tool_reply"], on="suppress_model_reply"
        )
        | final_reply_awaited.from_(
            final_awaits_tool_speech,
            final_awaits_model_reply,
            cond=["runs_realtime_model", "is_tool_reply"],
        )
        # a model seen answering tool output on its own in the conversation does so from
        # then on, whatever its link told (in awaiting_agent, the model's reply answers a
        # caller who spoke first: its speech starts the conversation, agent_speech_created)
        | tool_replies_on_request.to(
            auto_tool_replies, cond=["runs_realtime_model", "in_conversation", "is_tool_reply"]
        )
    )

    # the wait for the model is over: the greeting is asked for anyway (a refusal is
    # retried once, as any failed start), or the final reply
    response_done_timer_expired = (
        greeting_awaiting_model.to(greeting_requested)
        | retry_awaiting_model.to(retry_requested)
        | final_awaits_model_free.to(final_reply_asked)
    )

    # the model gave no answer of its own in time: the final reply is asked for, once
    # the model is free
    model_reply_timer_expired = final_awaits_model_reply.to(final_awaits_model_free)

    # the spill-over window is over: speech that starts now is new
    spill_over_timer_expired = spill_over_window.to(listening_open)

    # LiveKit did not interrupt the held reply's speech in time: the reply is sent
    tool_reply_hold_timer_expired = held_after_caller_stops.to(reply_free)

    del in_call, connecting, start, ringing, turn, awaiting_user, awaiting_agent, greeting
    del greeting_awaiting_model, greeting_requested, greeting_playing, greeting_retry
    del retry_awaiting_model, retry_requested, retry_playing, not_started, names_it
    del greeting_pending, retry_pending
    del conversation
    del listening, listening_open, spill_over_window, discarding_overlap, replaying_held_audio
    del replay_unheard, replay_heard_caller, speaking, tool_loop, caller_silent, caller_speaking
    del caller_spoke_over_greeting
    del tools_open, tool_loop_interrupted, capped, due, final_awaits_tool_speech
    del final_awaits_model_reply, final_awaits_model_free, final_reply_asked
    del final_reply_awaited, final_reply_playing, final_reply_over
    del reply_free, reply_held, held_while_caller_speaks, held_after_caller_stops
    del agent_keeps_call, handing_off
    del model_unlinked, model_free, model_responding, model_cancelling
    del cancelling_active, cancelling_idle
    del turn_replies_on_request, auto_turn_replies, tool_replies_on_request, auto_tool_replies
    del leave_greeting, speech_ended, agents_turn, committing
    del interrupted
    del call_wide
    return dict(locals())


Extension = Callable[[dict[str, Any]], None]
"""Changes a fresh chart declaration in place: adds events (``chart["name"] = ...``) or
transitions to existing ones (``chart["event"] = chart["event"] | ...``). Its states,
by id: ``chart_states(chart)["speaking"]``. New guard and action names go on a
:class:`~turnfsm.rules.TurnRules` subclass passed as the controller's ``rules_class``."""


def chart_states(chart: dict[str, Any]) -> dict[str, State]:
    """Every state of a chart declaration (:func:`declare_chart`), compound ones too, by id.
    (The outermost ones get their ids when the class is made: they go by their names.)"""
    outermost = {name: chart[name] for name in ("call", "ended")}
    nested = {state.id: state for state in walk_states(chart["call"].states)}
    return {**outermost, **nested}


def build_machine(*extensions: Extension, name: str = "CustomTurnMachine") -> type[TurnChart]:
    """A new machine class: the turn chart, changed by each extension in order.

    Every call declares new states and transitions, so neither :data:`TurnMachine` nor
    an earlier build is affected. Check the result with :func:`turnfsm.testing.explore`
    or ``turnfsm check``.
    """
    chart = declare_chart()
    for extend in extensions:
        extend(chart)
    chart["__module__"] = __name__
    machine_class = type(name, (TurnChart,), chart)
    refuse_timers_started_before_any_event(machine_class)
    return machine_class


TurnMachine: type[TurnChart] = build_machine(name="TurnMachine")
"""A voice call's turns: ``start → ringing`` (outbound) ``→ awaiting_user → greeting →
listening ⇄ speaking ⇄ tool_loop``, and ``ended`` from anywhere."""


def walk_states(states: Any) -> Iterator[State]:
    """Every state under ``states`` (a chart's or a state's), parents before children, in
    declaration order."""
    for state in states:
        yield state
        yield from walk_states(state.states)


def entry_leaves(state: State) -> list[str]:
    """The atomic states entering ``state`` ends in: every region of a parallel state,
    a compound state's initial child, down the tree."""
    if not state.states:
        return [str(state.id)]
    if state.parallel:
        return [leaf for region in state.states for leaf in entry_leaves(region)]
    return entry_leaves(next(child for child in state.states if child.initial))


VOICE_REGION = "caller_voice"
"""The region beside the turn that follows the caller's voice."""

MODEL_REGION = "model_activity"
"""The region beside the call's course that follows the realtime model's activity."""


def side_region_of(state: State) -> State | None:
    """The region beside the turn that ``state`` is in (itself, if it is one), if any: a
    region of a parallel state but its first, which is the turn's. (The outermost such
    region, where regions nest.)"""
    found, node = None, state
    while node.parent is not None:
        if node.parent.parallel and node.id != node.parent.states[0].id:
            found = node
        node = node.parent
    return found


@functools.cache
def side_regions(machine_class: type[TurnChart] = TurnMachine) -> tuple[State, ...]:
    """The regions beside the turn, in document order: every region of a parallel state
    but its first (the turn's own). (Cached: a chart class never changes.)"""
    return tuple(
        state for state in walk_states(machine_class.states) if side_region_of(state) is state
    )


@functools.cache
def _atomic(machine_class: type[TurnChart]) -> tuple[State, ...]:
    return tuple(state for state in walk_states(machine_class.states) if not state.states)


@functools.cache
def leaf_states(machine_class: type[TurnChart] = TurnMachine) -> tuple[State, ...]:
    """The states a call can be in (the atomic ones outside the regions beside the turn),
    in declaration order."""
    return tuple(state for state in _atomic(machine_class) if side_region_of(state) is None)


@functools.cache
def region_states(
    machine_class: type[TurnChart] = TurnMachine,
) -> Mapping[str, tuple[State, ...]]:
    """The atomic states of each region beside the turn, by the region's id, in document
    order (regions and states)."""
    return MappingProxyType(
        {
            region.id: tuple(s for s in walk_states([region]) if not s.states)
            for region in side_regions(machine_class)
        }
    )


def voice_states(machine_class: type[TurnChart] = TurnMachine) -> tuple[State, ...]:
    """The states of the caller's voice, beside the turn while the call is live."""
    return region_states(machine_class)[VOICE_REGION]


def atomic_states(machine_class: type[TurnChart] = TurnMachine) -> tuple[State, ...]:
    """The call's states, then each region's beside the turn: every atomic state of the
    chart."""
    return (
        *leaf_states(machine_class),
        *(state for states in region_states(machine_class).values() for state in states),
    )


def _configurations_in(states: Any) -> Iterator[tuple[str, ...]]:
    """The configurations (atomic states, in document order) inside any one of ``states``."""
    for state in states:
        if not state.states:
            yield (state.id,)
        elif state.parallel:
            for parts in itertools.product(*(list(_configurations_in([r])) for r in state.states)):
                yield tuple(leaf for part in parts for leaf in part)
        else:
            yield from _configurations_in(state.states)


@functools.cache
def configurations(machine_class: type[TurnChart] = TurnMachine) -> tuple[tuple[str, ...], ...]:
    """Every configuration of the chart, as :attr:`TurnController.configuration` names it:
    one atomic state per active region, in document order (the turn's first, then one of
    each region beside it: the caller's voice while the call is live, the model's
    activity and what it answers on its own until it ends)."""
    return tuple(_configurations_in(machine_class.states))


def _names(transition: Transition) -> list[str]:
    return [str(event) for event in transition.events]


def leaf_transitions(state: State) -> Iterator[Transition]:
    """The event transitions that can fire in ``state``, in the order they are tried: its
    own, then its parents'. One after an unguarded transition of its event never fires
    there, and is left out. For a state of a region beside the turn (the caller's
    voice), those of its region only: the call's own (``call.to(ended)``) are the turn's
    moves, taken once for every region."""
    closed: set[str] = set()
    node: State | None = state
    last = side_region_of(state)
    while node is not None:
        for transition in node.transitions:
            names = set(_names(transition))
            if names - closed:
                yield transition
                if not any(not spec.is_convention for spec in transition.cond):
                    closed |= names
        node = None if node is last else node.parent


@functools.cache
def handled_events(
    machine_class: type[TurnChart] = TurnMachine,
) -> Mapping[str, frozenset[str]]:
    """For each atomic state id (the regions' beside the turn too), the events that have at least
    one transition from it. (Cached, read-only: a chart class never changes.)"""
    return MappingProxyType(
        {
            state.id: frozenset(name for t in leaf_transitions(state) for name in _names(t))
            for state in atomic_states(machine_class)
        }
    )


def declared_moves(machine_class: type[TurnChart] = TurnMachine) -> set[tuple[str, str, str]]:
    """(source, event, target) for every declared transition, from every atomic state it
    can fire in (the regions' beside the turn too), named as :attr:`TurnController.state` reports
    them (a move between the greeting's phases stays in ``greeting``); a targetless
    transition stays in its state."""
    public = public_states(machine_class)
    return {
        (public[state.id], event, public[(transition.target or state).id])
        for state in atomic_states(machine_class)
        for transition in leaf_transitions(state)
        for event in _names(transition)
    }


def transition_key(transition: Transition) -> tuple[str, int]:
    """A declared transition's name across processes: the state that declares it and its
    place among that state's transitions."""
    declared = transition.source.transitions
    return transition.source.id, next(i for i, t in enumerate(declared) if t is transition)


PHASED_STATES: tuple[str, ...] = ("greeting", "listening", "capped", "reply_held")
"""Compound states whose sub-states are phases of one state: :attr:`TurnController.state`
(and a trace's steps, the invariants, the outcome monitor) report the compound's id in
each (the cap's ``capped`` and the tool reply's ``reply_held``, beside the turn: the moves
:func:`declared_moves` and the explorer name, and the overview diagram);
:attr:`TurnController.configuration` names the phase."""


@functools.cache
def public_states(machine_class: type[TurnChart] = TurnMachine) -> Mapping[str, str]:
    """For each state id of the chart, the state :attr:`TurnController.state` reports
    for it: itself, or the phased state it belongs to (:data:`PHASED_STATES`)."""
    public = {}
    for state in walk_states(machine_class.states):
        node: State | None = state
        while node is not None and node.id not in PHASED_STATES:
            node = node.parent
        public[state.id] = state.id if node is None else node.id
    return MappingProxyType(public)


def public_state(state: str) -> str:
    """The state :attr:`TurnController.state` reports for a state of the turn chart
    (``greeting`` for ``greeting_playing``); any other id is itself."""
    return public_states().get(state, state)


LEAF_STATES: tuple[str, ...] = tuple(state.id for state in leaf_states())
"""The atomic states a call can be in, as :attr:`TurnController.configuration` names
them (the greeting's phases, not ``greeting``)."""

STATES: tuple[str, ...] = tuple(dict.fromkeys(public_state(leaf) for leaf in LEAF_STATES))
"""The states a call can be in, as :attr:`TurnController.state` reports them."""

REGION_STATES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {region: tuple(state.id for state in states) for region, states in region_states().items()}
)
"""The atomic states of each region beside the turn, by region
(``TurnController.configuration`` names one of each active one after the turn's)."""

VOICE_STATES: tuple[str, ...] = REGION_STATES[VOICE_REGION]
"""The caller's voice while the call is live (``TurnController.configuration``)."""

MODEL_STATES: tuple[str, ...] = REGION_STATES[MODEL_REGION]
"""The realtime model's activity, from the call's start to its end
(``TurnController.configuration``)."""


@functools.cache
def states_beside(
    machine_class: type[TurnChart] = TurnMachine,
) -> Mapping[str, frozenset[str]]:
    """For each state a call can be in (:func:`leaf_states`), the states of the regions
    beside it that can be active with it (the caller's voice while live, the realtime
    model's activity and what it answers on its own until the end)."""
    beside: dict[str, set[str]] = {state.id: set() for state in leaf_states(machine_class)}
    for configuration in configurations(machine_class):
        beside[configuration[0]].update(configuration[1:])
    return MappingProxyType({state: frozenset(states) for state, states in beside.items()})


def leaves_under(compound: str) -> frozenset[str]:
    """The atomic states inside ``compound`` (itself, if atomic) in the turn chart."""
    (node,) = (state for state in walk_states(TurnMachine.states) if state.id == compound)
    return frozenset(state.id for state in walk_states([node]) if not state.states)


def _and_phased(leaves: frozenset[str]) -> frozenset[str]:
    """Atomic states, and the phased states among them as :attr:`TurnController.state`
    reports them."""
    return leaves | {public_state(leaf) for leaf in leaves}


GREETING_STATES: frozenset[str] = leaves_under("greeting")
"""The greeting's phases (atomic states)."""

LIVE_STATES: frozenset[str] = _and_phased(leaves_under("turn"))
"""States of a live call: the caller's voice runs beside them (atomic ones, and
``greeting`` and ``listening`` as :attr:`TurnController.state` reports their phases)."""


def states_acting(event: str, action: str) -> frozenset[str]:
    """The call's states (outside the regions beside the turn) where the chart handles ``event``
    with a transition that runs ``action``: a state set read from the chart itself."""
    return frozenset(
        state.id
        for state in leaf_states()
        for transition in leaf_transitions(state)
        if event in _names(transition)
        and action in (str(spec) for spec in (*transition.before, *transition.on))
    )


PRE_GREETING_STATES: frozenset[str] = states_acting("agent_speech_created", "stop_early_speech")
"""States before the greeting where the agent must not talk: an agent speech there is
stopped as it is created (invariant I8)."""

FIRST_WORDS_STATES: frozenset[str] = states_acting("user_turn_committed", "note_first_words")
"""Where the callee's first committed words are noted: the greeting answers them."""

CONVERSATION_STATES: frozenset[str] = _and_phased(leaves_under("conversation"))
"""States after the greeting, where tool rounds are counted (invariant I3): atomic ones,
and ``listening`` as :attr:`TurnController.state` reports its phases."""

CAPPED_PHASES: frozenset[str] = leaves_under("capped")
"""The tool cap's phases once a user turn's tool rounds reached the cap."""

HELD_PHASES: frozenset[str] = leaves_under("reply_held")
"""The phases of the hold of a tool step's reply (its region, ``tool_reply``)."""

LOCKED_STATES: frozenset[str] = frozenset({"greeting"}) | GREETING_STATES
"""States drawn and checked as locked: no interrupt effect is ever emitted in them (the
greeting, and each of its phases)."""


def chart_timers(machine_class: type[TurnChart] = TurnMachine) -> dict[str, tuple[After, ...]]:
    """The timers each state of a chart declares (:func:`after`), by state id."""
    return {
        state.id: timers_declared(state)
        for state in walk_states(machine_class.states)
        if timers_declared(state)
    }


def _timers_by_name() -> dict[str, After]:
    by_name: dict[str, After] = {}
    for declared in chart_timers().values():
        for timer in declared:
            first = by_name.setdefault(timer.timer, timer)
            if first != timer:  # its seconds, and whether it times the caller's silence
                raise ValueError(f"timer {timer.timer!r} is declared two ways: {first}, {timer}")
    return by_name


TIMERS: Mapping[str, After] = MappingProxyType(_timers_by_name())
"""Each timer of the turn chart, by name, with the policy field of its seconds (one way
for every state that declares it)."""

TIMER_STATES: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        name: frozenset().union(
            *(
                leaves_under(state)
                for state, timers in chart_timers().items()
                if any(timer.timer == name for timer in timers)
            )
        )
        for name in TIMERS
    }
)
"""The atomic states each timer can run in: those inside a state that declares it."""


_ANSWERED = ("awaiting_user", "awaiting_agent", "greeting", "listening", "speaking", "tool_loop")
"""The states of an answered call."""


def _everywhere(event: str, reason: str, *, but: str = "ended") -> dict[tuple[str, str], str]:
    return {(state, event): reason for state in STATES if state not in (but, "ended")}


IGNORED: dict[tuple[str, str], str] = {
    **_everywhere(
        "user_transcript",
        "transcripts are traced only; turns are decided on commit",
        but="awaiting_user",  # where the callee's first words may start the greeting
    ),
    **{
        key: "playback is traced only; the state follows creation"
        for key in _everywhere("agent_speech_started", "")
        if key[0] not in CONVERSATION_STATES
    },
    **_everywhere("call_ringing", "informational: the call starts on call_answered"),
    **_everywhere(
        "outcome_breached",
        "the outcome monitor's verdict on the session: traced only, for the report",
    ),
    **{
        (state, "call_answered"): "the call is already answered (a duplicate, or inbound)"
        for state in _ANSWERED
    },
    ("start", "call_answered"): "an inbound call goes live on session_started (an outbound"
    " one is never in start: it rings at once)",
    ("ringing", "session_started"): "an outbound call starts on call_answered",
    **{
        (state, "session_started"): "a duplicate: the session has already started"
        for state in _ANSWERED
    },
    **{
        ("awaiting_agent", event): "no speech of the agent exists yet"
        for event in (
            "assistant_message_committed",
            "user_turn_declined",  # a reply LiveKit prepared would have left awaiting_agent
        )
    },
    **{
        (state, event): reason
        for state, reason in (
            ("ringing", "before the answer nobody is on the line"),
            ("start", "before the session starts its input is not listened to"),
        )
        for event in ("user_speech_started", "user_speech_ended")
    },
    ("start", "user_turn_committed"): "before the session starts no turn is committed",
    **{
        (state, "user_turn_ended"): "a reply to tool output is held only in the"
        " conversation: LiveKit alone decides on the turn"
        for state in ("start", "ringing", "awaiting_user", "awaiting_agent", "greeting")
    },
    **{
        (state, "user_turn_declined"): reason
        for state, reason in (
            ("start", "before the session starts no turn is committed"),
            ("ringing", "before the answer nobody is on the line"),
            (
                "awaiting_user",
                "a speech before the greeting is stopped as it is created (I8): no prepared"
                " reply is left",
            ),
            (
                "greeting",
                "the reply prepared for the first words is dropped as the greeting starts;"
                " LiveKit prepares none while the greeting plays",
            ),
        )
    },
    **{
        (state, timer.event): f"the {timer.timer} timer runs only in"
        f" {', '.join(sorted(TIMER_STATES[timer.timer]))}: an expiry here is stale"
        for timer in TIMERS.values()
        for state in STATES
        if not any(public_state(leaf) == state for leaf in TIMER_STATES[timer.timer])
        # (the cap's waits run beside the conversation, the hold's beside a step's speech)
        and not (state in CONVERSATION_STATES and TIMER_STATES[timer.timer] & CAPPED_PHASES)
        and not (state in ("speaking", "tool_loop") and TIMER_STATES[timer.timer] & HELD_PHASES)
    },
    **{
        (state, "assistant_message_committed"): "an early speech is stopped before it says"
        " anything the history keeps"
        for state in ("start", "ringing", "awaiting_user")
    },
    **{
        (state, event): "tools before the greeting are not a user turn; the early speech"
        " that calls them is stopped"
        for state in ("start", "ringing")
        for event in ("tool_step_started", "tool_step_finished")
    },
    **{
        (state, "agent_speech_interrupted"): reason
        for state, reason in (
            ("start", "the machine stopped the early speech itself"),
            ("ringing", "the machine stopped the early speech itself"),
        )
    },
    **{
        (state, "effect_outcome"): "no lever outcome changes this state: traced only"
        " (see OUTCOME_DECISIONS)"
        for state in (
            "start",
            "ringing",
            "awaiting_user",
            "awaiting_agent",
        )
    },
    **{
        ("ended", event): "the call has already ended: nothing is emitted after the end"
        for event in EVENTS_BY_NAME
    },
}
"""Why a state has no transition for an event, per (state, event) pair; the test suite
checks that every pair is a transition or listed here with a reason, and nothing else.
A transition of a region beside the state counts: the tool cap's region takes a step's
end and an interrupted speech, and the tool reply's a step's start, in every live state
(their guards let them through only in the conversation, where tool rounds are counted:
before it, tools are no user turn's, and the early speech that calls them is stopped);
the region of the model's replies to tool output takes the model's own reply in every
state of the call (noted only in the conversation)."""

OUTCOME_DECISIONS: dict[str, str] = {
    "mute_input": "traced only: the outcome monitor reports caller audio heard in a lock",
    "unmute_input": "in listening, the greeting's held audio replayed (mute_input +"
    " answer_whole): the user turns held through the replay are resumed, its speech"
    " committed as one turn (the replay's unmute reports its outcome once the replay is"
    " over, done or not); elsewhere traced only: the outcome monitor reports input left"
    " muted",
    "lock_speech": "traced only: the outcome monitor reports an unlocked greeting",
    "start_greeting": "in greeting, before its speech exists: said again once as a locked"
    " Say of the fixed text; a generated greeting, or a second failure, ends the call"
    " (greeting_failed), never a deaf greeting",
    "hold_user_turns": "traced only: the outcome monitor reports a reply to an overlap",
    "resume_user_turns": "traced only: the outcome monitor reports a deaf agent",
    "interrupt": "in tool_loop after LiveKit's interruption: the loop goes on (its"
    " reply is spoken); before the greeting traced only: the outcome monitor reports"
    " agent audio before the greeting",
    "drop_unspoken_text": "traced only: the outcome monitor compares history and audio",
    "clear_user_turn": "traced only: the next turn may carry the overlap's words",
    "reject_user_turn": "traced only: the outcome monitor reports a reply to an overlap",
    "cancel_tool_reply": "traced only: the outcome monitor counts tool rounds",
    "hold_tool_reply": "in reply_held: the hold is left for reply_free without a release"
    " (its timer cancelled): the reply to the tool output goes to the model unheld, as"
    " LiveKit alone would send it",
    "release_tool_reply": "traced only: the adapter drops a held reply's gate when its"
    " speech ends or the adapter detaches, and LiveKit's interruption cancels the reply",
    "final_reply_without_tools": "traced only: the next user turn starts a fresh count",
    "start_timer": "traced only: the timer never fires, the call goes on without it",
    "cancel_timer": "traced only: a late expiry is stale and ignored",
    "say": "in greeting, the retried greeting failed too: the call ends"
    " (greeting_failed); a re-prompt or fallback is traced only",
    "end_call": "traced only: the session's close still ends the call (call_ended)",
    "suppress_reply": "traced only: the outcome monitor reports audio before the greeting's"
    " and replies to an overlap",
    "pause_model_replies": "traced only: the input gate still keeps the caller from the model",
    "resume_model_replies": "traced only: the outcome monitor reports a deaf agent",
    "forbid_tools": "traced only: the outcome monitor counts tool rounds",
    "allow_tools": "traced only: the next user turn allows tools again",
}
"""What the machine does when a lever reports an effect ``refused`` or ``failed``
(``effect_outcome``); a ``done`` outcome is traced only, but for the end of the
greeting's replay (``unmute_input``). A test checks every effect is listed."""
