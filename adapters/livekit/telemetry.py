"""The turn machine in LiveKit's traces, and per-call turn metrics.

:func:`trace_turns` puts each state the machine visits on LiveKit's OpenTelemetry
trace as a span under the session's ``agent_session`` span (LiveKit's tracer, so the
provider given to ``livekit.agents.telemetry.set_tracer_provider`` receives them):

* span ``turnfsm.<state>`` (``turnfsm.greeting``, ``turnfsm.listening``...) from the step
  that entered the state to the step that left it, with attributes ``turnfsm.call_id``,
  ``turnfsm.state``, ``turnfsm.direction``, ``turnfsm.policy`` (the policy as JSON), and
  on leaving ``turnfsm.exit_event`` (the event that moved the machine on) and
  ``turnfsm.next_state``. The ``ended`` span carries ``turnfsm.end_reason`` and the
  call's metrics as ``turnfsm.metrics.*`` attributes;
* one span event per effect (``start_greeting``, ``interrupt``...) on the span of the
  state the step ends in, with the event that caused it (``turnfsm.event``) and the
  effect's fields as ``turnfsm.effect.*`` (transcript text only as its length unless the
  controller keeps text);
* one ``effect_outcome`` span event per lever outcome the adapter reports (done,
  refused by LiveKit, failed).

The call's turn metrics (:class:`turnfsm.metrics.CallMetrics`: time in each state,
greeting overlaps and how they were handled, unspoken characters dropped, tool rounds and
caps, re-prompts, the end reason) go to ``on_metrics`` once, when the machine ends.
LiveKit 1.8's ``metrics_collected`` event is not used: it accepts only LiveKit's own
metric types (and is deprecated in favour of ``session_usage_updated``).

Embedding, after :func:`~turnfsm.adapters.livekit.attach` and before ``session.start``::

    adapter = attach(session, controller)
    trace_turns(adapter, call_id=ctx.room.name, on_metrics=lambda m: logger.info("%s", m))

Nothing here can break the call: a failing span or callback is logged by the adapter
as a failed step observer, and the call goes on.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import attrs
from livekit.agents.telemetry import tracer
from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.util.types import AttributeValue

from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.metrics import CallMeter, CallMetrics
from turnfsm.trace import TraceStep, redact

from .adapter import TurnAdapter

MetricsCallback = Callable[[CallMetrics], None]


def trace_turns(
    adapter: TurnAdapter,
    *,
    call_id: str | None = None,
    on_metrics: MetricsCallback | None = None,
) -> TurnTelemetry:
    """Trace ``adapter``'s machine in LiveKit's traces and report the call's metrics.

    Args:
        adapter: the adapter :func:`~turnfsm.adapters.livekit.attach` returned.
        call_id: the call's id on every span (the room name or SIP call id); a random
            one by default.
        on_metrics: called once with the call's :class:`~turnfsm.metrics.CallMetrics`
            when the machine reaches ``ended``.
    """
    telemetry = TurnTelemetry(adapter, call_id=call_id or uuid.uuid4().hex, on_metrics=on_metrics)
    adapter.observers.append(telemetry.observe)
    return telemetry


class TurnTelemetry:
    """Spans, span events and metrics of one call, fed step by step by the adapter."""

    def __init__(
        self,
        adapter: TurnAdapter,
        *,
        call_id: str,
        on_metrics: MetricsCallback | None = None,
    ) -> None:
        policy = adapter.controller.policy
        self.adapter = adapter
        self.call_id = call_id
        self.on_metrics = on_metrics
        self.meter = CallMeter(policy)
        self.metrics: CallMetrics | None = None
        """The call's metrics, once it ended."""
        self._attributes: dict[str, AttributeValue] = {
            "turnfsm.call_id": call_id,
            "turnfsm.direction": policy.direction,
            "turnfsm.policy": json.dumps(policy.to_dict(), sort_keys=True),
        }
        self._span: otel_trace.Span | None = None
        self._state: str | None = None

    def observe(self, step: TraceStep) -> None:
        """Take one step of the call (the adapter calls this before running its effects)."""
        self.meter.add(step)
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
            span.add_event(effect.name, self._effect_attributes(step, effect), timestamp=now)
        if isinstance(step.event, ev.EffectOutcome):
            span.add_event(step.event.name, _fields(step.event, "turnfsm.outcome."), now)
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
        metrics = self.metrics = self.meter.result()
        assert self._span is not None
        self._span.set_attributes(_metric_attributes(metrics))
        self._span.end(end_time=now)
        self._span = None
        if self.on_metrics is not None:
            self.on_metrics(metrics)

    def _effect_attributes(self, step: TraceStep, effect: fx.Effect) -> dict[str, AttributeValue]:
        shown = effect if self.adapter.controller.keep_text else redact(effect)
        return {"turnfsm.event": step.event.name, **_fields(shown, "turnfsm.effect.")}


def _session_context(adapter: TurnAdapter) -> otel_context.Context | None:
    """The context of LiveKit's ``agent_session`` span while the session runs.

    LiveKit 1.8 keeps it on the session (``_root_span_context``, set in ``start`` and
    cleared after ``close``); the telemetry tests check that state spans nest under it.
    Before the session starts, the ambient context is used.
    """
    context = getattr(adapter.session, "_root_span_context", None)
    return context if isinstance(context, otel_context.Context) else None


def _fields(item: Any, prefix: str) -> dict[str, AttributeValue]:
    """An event's or effect's fields as span attributes (``None`` left out)."""
    return {
        f"{prefix}{name}": value
        for name, value in attrs.asdict(item).items()
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
