"""The turn machine in LiveKit's traces and metrics, and one summary line per call.

**Every call** (nothing to set up; the adapter does it when the machine ends):

* one INFO line on the ``turnfsm.adapters.livekit`` logger, with the figures as
  ``extra`` fields (:func:`report_call`)::

      turnfsm: call ended (hangup) after 18.1 s: greeting heard after 2.13 s, 0 overlaps,
      1 barge-in, 2 discarded speeches, 1 drop (116 chars), 0 tool caps, 0 outcome breaches

* its figures on OpenTelemetry meter instruments beside LiveKit's ``lk.agents.*`` ones:
  the global meter provider's meter ``turnfsm`` (the provider LiveKit's instruments use:
  ``opentelemetry.metrics.set_meter_provider``), each measurement with LiveKit's job
  attributes (as on its own) and ``turnfsm.policy.direction``:

  ====================================  =========  =======================================
  instrument                            kind       one measurement per call
  ====================================  =========  =======================================
  ``turnfsm.call.time_to_greeting``     histogram  seconds from the answer to the
                                                   greeting's first audio (when heard)
  ``turnfsm.call.ended``                counter    1, by ``turnfsm.end_reason``
  ``turnfsm.greeting.overlaps``         counter    times the caller talked over the
                                                   greeting, by
                                                   ``turnfsm.policy.greeting_overlap``
                                                   (``answer_whole``: answered whole after
                                                   it; ``drop``: dropped)
  ``turnfsm.greeting.overlap_dropped``  counter    pieces of that speech dropped
  ``turnfsm.turn.barge_ins``            counter    speeches the caller cut after hearing
                                                   some of their audio
  ``turnfsm.turn.discarded_speeches``   counter    speeches stopped before any audio
                                                   (preemptive replies LiveKit threw away)
  ``turnfsm.turn.unspoken_text_drops``  counter    interrupted replies whose committed text
                                                   was trimmed to what was played
  ``turnfsm.turn.unspoken_characters``  counter    characters so trimmed
  ``turnfsm.tool.cap_hits``             counter    times the tool-round cap was hit
  ``turnfsm.outcome.breaches``          counter    outcome-check breaches
                                                   (:mod:`.outcomes`), by ``turnfsm.check``
                                                   (``O1``...)
  ====================================  =========  =======================================

**Traces**, with :func:`trace_turns`: each state the machine visits is a span under the
session's ``agent_session`` span (LiveKit's tracer, so the provider given to
``livekit.agents.telemetry.set_tracer_provider`` receives them):

* span ``turnfsm.<state>`` (``turnfsm.greeting``, ``turnfsm.listening``...) from the step
  that entered the state to the step that left it, with attributes ``turnfsm.call_id``,
  ``turnfsm.state``, the policy's settings as ``turnfsm.policy.<field>``, and on leaving
  ``turnfsm.exit_event`` (the event that moved the machine on) and ``turnfsm.next_state``.
  The ``ended`` span carries ``turnfsm.end_reason`` and the call's metrics as
  ``turnfsm.metrics.*`` attributes;
* one span event per effect (``start_greeting``, ``interrupt``...) on the span of the
  state the step ends in, with the event that caused it (``turnfsm.event``) and the
  effect's fields as ``turnfsm.effect.<field>``;
* one ``effect_outcome`` span event per lever outcome the adapter reports (done,
  refused by LiveKit, failed), its fields as ``turnfsm.outcome.<field>``.

Text follows LiveKit's PII convention: an attribute holding a text of the call or of the
policy (the greeting, a heard text...) is keyed with a ``pii`` segment,
``turnfsm.pii.policy.greeting``, ``turnfsm.pii.effect.text``, so LiveKit's PII filter drops
it before every exporter not granted PII (``set_tracer_provider(...,
allow_pii=False)``), and its value is ``[redacted]`` unless the controller keeps text:
the one redaction of the trace file (:func:`turnfsm.trace.redact`). Metric attributes and
the summary line hold no text.

The call's turn metrics (:class:`turnfsm.tools.metrics.CallMetrics`) also go to ``on_metrics``
once, when the machine ends. LiveKit 1.8's ``metrics_collected`` event is not used: it
accepts only LiveKit's own metric types (and is deprecated in favour of
``session_usage_updated``).

Embedding, after :func:`~turnfsm.adapters.livekit.attach` and before ``session.start``::

    adapter = attach(session, controller)
    trace_turns(adapter, call_id=ctx.job.id, on_metrics=dashboard.add)

Nothing here can break the call: a failing span, instrument or callback is logged by the
adapter as a failed step observer (or call report), and the call goes on.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Protocol

import attrs
from livekit.agents import AgentSession
from livekit.agents.telemetry import otel_metrics, tracer
from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics_api
from opentelemetry import trace as otel_trace
from opentelemetry.util.types import AttributeValue

from turnfsm import TurnController
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.fields import text_fields
from turnfsm.policy import TurnPolicy
from turnfsm.tools.metrics import CallMeter, CallMetrics
from turnfsm.trace import TraceStep, redact

from .log import logger


class Traced(Protocol):
    """What the telemetry reads of the adapter (:class:`~.adapter.TurnAdapter`)."""

    @property
    def session(self) -> AgentSession: ...

    @property
    def controller(self) -> TurnController: ...

    @property
    def observers(self) -> list[Callable[[TraceStep], None]]: ...

    @property
    def call_meter(self) -> CallMeter: ...


MetricsCallback = Callable[[CallMetrics], None]

_meter = otel_metrics_api.get_meter("turnfsm")

_time_to_greeting = _meter.create_histogram(
    "turnfsm.call.time_to_greeting",
    unit="s",
    description="Time from the answer to the greeting's first audio",
)
_calls_ended = _meter.create_counter(
    "turnfsm.call.ended", description="Calls ended, by end reason"
)
_greeting_overlaps = _meter.create_counter(
    "turnfsm.greeting.overlaps",
    description="Times the caller talked over the greeting, by how the policy handles it",
)
_outcome_breaches = _meter.create_counter(
    "turnfsm.outcome.breaches", description="Outcome-check breaches, by check"
)
_COUNTED_FIGURES: dict[str, tuple[str, str]] = {
    "overlap_dropped": (
        "turnfsm.greeting.overlap_dropped",
        "Pieces of speech over the greeting dropped",
    ),
    "barge_ins": (
        "turnfsm.turn.barge_ins",
        "Agent speeches the caller cut after hearing some of their audio",
    ),
    "discarded_speeches": (
        "turnfsm.turn.discarded_speeches",
        "Agent speeches stopped before any of their audio played",
    ),
    "drops": (
        "turnfsm.turn.unspoken_text_drops",
        "Interrupted replies whose committed text was trimmed to what was played",
    ),
    "dropped_chars": (
        "turnfsm.turn.unspoken_characters",
        "Characters of committed text trimmed because they were never played",
    ),
    "tool_caps": ("turnfsm.tool.cap_hits", "Times the tool-round cap was hit"),
}
"""The :class:`~turnfsm.tools.metrics.CallMetrics` counts added to a counter as they are:
figure -> (instrument, description)."""
_counters = {
    figure: _meter.create_counter(name, description=description)
    for figure, (name, description) in _COUNTED_FIGURES.items()
}


def report_call(metrics: CallMetrics, breaches: dict[str, int]) -> None:
    """Report an ended call: its figures on the meter instruments, and one INFO line.

    Args:
        metrics: the call's metrics.
        breaches: outcome-check breaches found by the end of the call, by check.
    """
    attributes: dict[str, AttributeValue] = {
        **otel_metrics._job_attrs(),  # LiveKit's own attribution of a measurement to its job
        "turnfsm.policy.direction": metrics.direction,
    }
    reason = metrics.end_reason or "not ended"
    _calls_ended.add(1, {**attributes, "turnfsm.end_reason": reason})
    if metrics.time_to_greeting is not None:
        _time_to_greeting.record(metrics.time_to_greeting, attributes)
    if metrics.overlap_handling is not None:
        handling = {**attributes, "turnfsm.policy.greeting_overlap": metrics.overlap_handling}
        _greeting_overlaps.add(metrics.greeting_overlaps, handling)
    for figure, counter in _counters.items():
        counter.add(getattr(metrics, figure), attributes)
    for check, count in sorted(breaches.items()):
        _outcome_breaches.add(count, {**attributes, "turnfsm.check": check})
    logger.info(
        "turnfsm: call ended (%s) after %.1f s: %s",
        reason,
        metrics.duration,
        _summary(metrics, sum(breaches.values())),
        extra={
            "end_reason": reason,
            "duration": round(metrics.duration, 3),
            "time_to_greeting": metrics.time_to_greeting,
            "greeting_overlaps": metrics.greeting_overlaps,
            "barge_ins": metrics.barge_ins,
            "discarded_speeches": metrics.discarded_speeches,
            "drops": metrics.drops,
            "dropped_chars": metrics.dropped_chars,
            "tool_caps": metrics.tool_caps,
            "reprompts": metrics.reprompts,
            "lever_problems": sum(metrics.lever_outcomes.values()),
            "outcome_breaches": dict(breaches),
        },
    )


def _summary(metrics: CallMetrics, breaches: int) -> str:
    """The figures of the summary line, in words."""
    greeting = (
        f"greeting heard after {metrics.time_to_greeting:.2f} s"
        if metrics.time_to_greeting is not None
        else "no greeting heard"
    )
    return ", ".join(
        (
            greeting,
            _count(metrics.greeting_overlaps, "overlap", "overlaps"),
            _count(metrics.barge_ins, "barge-in", "barge-ins"),
            _count(metrics.discarded_speeches, "discarded speech", "discarded speeches"),
            f"{_count(metrics.drops, 'drop', 'drops')} ({metrics.dropped_chars} chars)",
            _count(metrics.tool_caps, "tool cap", "tool caps"),
            _count(breaches, "outcome breach", "outcome breaches"),
        )
    )


def _count(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


def trace_turns(
    adapter: Traced,
    *,
    call_id: str | None = None,
    on_metrics: MetricsCallback | None = None,
) -> TurnTelemetry:
    """Trace ``adapter``'s machine in LiveKit's traces and report the call's metrics.

    Args:
        adapter: the adapter :func:`~turnfsm.adapters.livekit.attach` returned.
        call_id: the call's id on every span (e.g. the job id); a random one by default.
        on_metrics: called once with the call's :class:`~turnfsm.tools.metrics.CallMetrics`
            when the machine reaches ``ended``.
    """
    telemetry = TurnTelemetry(adapter, call_id=call_id or uuid.uuid4().hex, on_metrics=on_metrics)
    adapter.observers.append(telemetry.observe)
    return telemetry


class TurnTelemetry:
    """Spans, span events and metrics of one call, fed step by step by the adapter."""

    def __init__(
        self,
        adapter: Traced,
        *,
        call_id: str,
        on_metrics: MetricsCallback | None = None,
    ) -> None:
        self.adapter = adapter
        self.call_id = call_id
        self.on_metrics = on_metrics
        self.metrics: CallMetrics | None = None
        """The call's metrics, once it ended."""
        self._keep_text = adapter.controller.keep_text
        self._attributes: dict[str, AttributeValue] = {
            "turnfsm.call_id": call_id,
            **_fields(adapter.controller.policy, "policy", keep_text=self._keep_text),
        }
        self._span: otel_trace.Span | None = None
        self._state: str | None = None

    def observe(self, step: TraceStep) -> None:
        """Take one step of the call (the adapter calls this before running its effects)."""
        if self.metrics is not None:
            return  # after the end: late events change nothing on the trace
        now = time.time_ns()
        if self._span is None:
            self._open(step.before, now)
        if step.after != self._state:
            self._leave(step, now)
            self._open(step.after, now)
        span = self._span
        assert span is not None
        for effect in step.effects:
            attributes = _fields(effect, "effect", keep_text=self._keep_text)
            span.add_event(effect.name, {"turnfsm.event": step.event.name, **attributes}, now)
        if isinstance(step.event, ev.EffectOutcome):
            attributes = _fields(step.event, "outcome", keep_text=self._keep_text)
            span.add_event(step.event.name, attributes, now)
        if step.after == "ended":
            self._end(now)

    def _open(self, state: str, now: int) -> None:
        self._state = state
        self._span = tracer.start_span(
            f"turnfsm.{state}",
            context=_session_context(self.adapter),
            attributes={**self._attributes, "turnfsm.state": state},
            start_time=now,
        )

    def _leave(self, step: TraceStep, now: int) -> None:
        assert self._span is not None
        self._span.set_attributes(
            {"turnfsm.exit_event": step.event.name, "turnfsm.next_state": step.after}
        )
        self._span.end(end_time=now)
        self._span = None

    def _end(self, now: int) -> None:
        """The call ended: close the ``ended`` span with the metrics and report them."""
        metrics = self.metrics = self.adapter.call_meter.result()
        assert self._span is not None
        self._span.set_attributes(_metric_attributes(metrics))
        self._span.end(end_time=now)
        self._span = None
        if self.on_metrics is not None:
            self.on_metrics(metrics)


def _session_context(adapter: Traced) -> otel_context.Context | None:
    """The context of LiveKit's ``agent_session`` span while the session runs.

    LiveKit 1.8 keeps it on the session (``_root_span_context``, set in ``start`` and
    cleared after ``close``); the telemetry tests check that state spans nest under it.
    Before the session starts, the ambient context is used.
    """
    context = getattr(adapter.session, "_root_span_context", None)
    return context if isinstance(context, otel_context.Context) else None


def _fields(
    item: ev.Event | fx.Effect | TurnPolicy, group: str, *, keep_text: bool
) -> dict[str, AttributeValue]:
    """An event's, effect's or policy's fields as span attributes ``turnfsm.<group>.<field>``
    (``None`` left out); its text fields under LiveKit's PII marker,
    ``turnfsm.pii.<group>.<field>``, redacted unless text is kept."""
    texts = text_fields(type(item))
    return {
        f"turnfsm.pii.{group}.{name}" if name in texts else f"turnfsm.{group}.{name}": value
        for name, value in attrs.asdict(redact(item, keep_text=keep_text)).items()
        if isinstance(value, str | bool | int | float)
    }


def _metric_attributes(metrics: CallMetrics) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {"turnfsm.end_reason": metrics.end_reason or ""}
    for name, value in attrs.asdict(metrics).items():
        if isinstance(value, bool | int | float | str):
            attributes[f"turnfsm.metrics.{name}"] = value
    for state, seconds in metrics.state_seconds.items():
        attributes[f"turnfsm.metrics.seconds.{state}"] = seconds
    for outcome, count in metrics.lever_outcomes.items():
        attributes[f"turnfsm.metrics.lever_outcomes.{outcome}"] = count
    attributes["turnfsm.metrics.states_visited"] = list(metrics.states_visited)
    return attributes
