"""The dispatcher: the run-to-completion queue, the levers' outcomes, the failure log.

The adapter's handlers translate LiveKit's objects into machine events (:mod:`.translate`)
and hand each to :meth:`Dispatcher.dispatch`. The dispatcher is the one reader of the
controller: it feeds it the event, runs every returned effect's lever with the port and
the site of the step (:class:`~.port.Site`), reports each lever's outcome back to the
machine as ``EffectOutcome`` (queued like any event), and queues the events raised while
levers run, so the machine takes one event at a time. Nothing escapes into LiveKit's
emitter: a handler, a lever, an observer or a future a lever awaits that fails is logged
once per place and error type (redacted unless the controller keeps text), and a
controller that fails releases the input (:func:`~.levers.release_input`).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import threading
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from turnfsm import TurnController
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.controller import ConcurrentUseError
from turnfsm.tools.metrics import CallMeter, CallMetrics
from turnfsm.trace import TraceStep, redact

from .effect_outcomes import EffectRefused, PendingOutcome
from .levers import release_input
from .log import logger
from .outcomes import OutcomeMonitor
from .port import Lever, LeverPort, Site
from .telemetry import report_call

_R = TypeVar("_R")

_ONE_EVENT = inspect.Signature(
    [inspect.Parameter("event", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
)
"""The signature of a guarded handler, ready-made: LiveKit's event emitter reads each
callback's signature on every emit (to pass it as many arguments as it takes), and the
realtime link's handlers see every protocol event, tens a second."""


class Dispatcher:
    """Runs one call's machine to completion, one event at a time, and its levers."""

    def __init__(
        self,
        controller: TurnController,
        port: LeverPort,
        outcomes: OutcomeMonitor,
        levers: dict[type[fx.Effect], Lever],
    ) -> None:
        self.controller = controller
        self.port = port
        port.runner = self
        self.outcomes = outcomes
        self.levers = levers
        """Every effect type's lever (the pipeline's, with the realtime link's in place)."""
        self.attached = False
        """Session events reach the adapter (from ``attach`` until ``detach``)."""
        self.site: object | None = None
        """The LiveKit event whose handler is running, or the agent hook being run (a
        :class:`~.turn_hook.UserTurnHook`), if any: handed to the levers of the steps it
        dispatches as their :attr:`.Site.call`."""
        self.observers: list[Callable[[TraceStep], None]] = []
        """Called with every step, before its effects run (the telemetry: telemetry.py)."""
        self.call_meter = CallMeter(controller.policy)
        """The call's turn metrics, fed every step (the figures of the call's summary line,
        its meter instruments and its spans: telemetry.py)."""
        self.call_metrics: CallMetrics | None = None
        """The call's metrics, once the machine ended (and the call was reported)."""
        self._queue: collections.deque[ev.Event] = collections.deque()
        self._dispatching = False
        self._thread: int | None = None
        """The thread of the session's event loop, the only one that may dispatch."""
        self._origin: float | None = None
        self._tasks: set[asyncio.Future[Any]] = set()
        self._hang_ups: set[asyncio.Future[Any]] = set()
        """``end_call``'s awaitables: awaited to their end, even after the session closed
        (detaching cancels the levers' other futures, never a hang-up)."""
        self._reported_failures: set[tuple[str, type[BaseException]]] = set()
        self._running: tuple[fx.Effect, str] | None = None
        """The effect whose lever runs now, and the state it was emitted in."""
        self._outcome: PendingOutcome | None = None
        """The outcome of the effect whose lever runs now."""
        self._handling = 0
        """Session handlers running now (a strict breach is raised at the outermost's end)."""

    @property
    def dispatching(self) -> bool:
        """A run-to-completion step runs now (an event dispatched meanwhile waits for it)."""
        return self._dispatching

    def now(self) -> float:
        """Seconds since the adapter started: the time stamped on every event."""
        loop_time = asyncio.get_running_loop().time()
        if self._origin is None:
            self._origin = loop_time
        return max(0.0, loop_time - self._origin)

    def cancel_tasks(self) -> None:
        """Cancel the levers' futures (detach), never a hang-up."""
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()

    # -- the run-to-completion step -----------------------------------------------------

    def dispatch(self, event: ev.Event) -> tuple[fx.Effect, ...]:
        """Feed an event to the controller, execute its effects and return them
        (:meth:`.TurnAdapter.dispatch`).

        Raises:
            ConcurrentUseError: called from another thread than the first dispatch's.
        """
        # -- turnfsm hardening (issue 11.4): one owner thread --------------------------
        caller = threading.get_ident()
        if self._thread is None:
            self._thread = caller
        elif caller != self._thread:
            raise ConcurrentUseError(
                f"TurnAdapter.dispatch called from thread {caller}, not from the session's "
                f"event loop thread {self._thread}: use loop.call_soon_threadsafe"
            )
        # -- end of the owner-thread check -----------------------------------------------
        if not self.attached:
            logger.debug(
                "turnfsm: %s after detach ignored", event.name, extra={"event": event.name}
            )
            return ()
        self.outcomes.agreement.activity()
        self._queue.append(event)
        if self._dispatching:
            return ()
        self._dispatching = True
        try:
            effects = self._step(self._queue.popleft())  # this event's: the queue was empty
            while self._queue:  # events its levers caused
                self._step(self._queue.popleft())
        finally:
            self._dispatching = False
        self.outcomes.agreement.step_through()
        if not self._handling:  # strict: a breach the step revealed (in a handler: at its end)
            self.outcomes.raise_pending()
        return effects

    def trace_only(self, event: ev.Event) -> None:
        """Record an event the machine ignores in every state (an ``OutcomeBreached``):
        queued behind the step running now, else taken at once; unlike :meth:`dispatch`
        it never raises a strict breach, so the outcome monitor may call it from LiveKit's
        audio chain."""
        if self._dispatching:
            self._queue.append(event)
        elif self.attached:
            self._step(event)

    def _step(self, event: ev.Event) -> tuple[fx.Effect, ...]:
        before = self.controller.state
        try:
            effects = self.controller.handle(event)
        except Exception as error:
            self._controller_failed(event, before, error)
            release_input(self.port, commit=False, report=self.report_failure)
            return ()
        step = TraceStep(event.at, event, before, self.controller.state, effects)
        self.call_meter.add(step)
        if self.observers:
            self._observe(step)
        if effects:
            site = Site(self.site)
            for effect in effects:
                self._execute(effect, before, site)
        self.outcomes.step(before, event, step.after, effects)
        if step.after == "ended" and self.call_metrics is None:
            self._call_ended()
        return effects

    def _call_ended(self) -> None:
        """The machine ended: report the call (its summary line and meter instruments),
        once its last effects ran and the outcome checks judged them."""
        self.call_metrics = self.call_meter.result()
        try:
            report_call(self.call_metrics, dict(self.outcomes.counts))
        except Exception as error:
            self.report_failure("call report", error, "the call ended")

    def _observe(self, step: TraceStep) -> None:
        for observer in self.observers:
            try:
                observer(step)
            except Exception as error:
                self.report_failure("step observer", error, f"{step.event.name} in {step.before}")

    def _execute(self, effect: fx.Effect, state: str, site: Site) -> None:
        previous, self._running = self._running, (effect, state)
        previous_outcome = self._outcome
        self._outcome = outcome = PendingOutcome(effect, self.dispatch, self.now)
        try:
            self.levers[type(effect)](self.port, effect, site)
        except EffectRefused as refusal:
            logger.debug(
                "turnfsm: %s refused: %s",
                effect.name,
                refusal.detail,
                extra={"effect": effect.name, "state": state},
            )
            outcome.lever_refused(refusal.detail)
        except Exception as error:
            self.report_failure(f"lever {effect.name}", error, self._describe(effect, state))
            outcome.lever_failed(error)
            if isinstance(effect, fx.UnmuteInput | fx.ResumeUserTurns):
                release_input(
                    self.port,
                    commit=isinstance(effect, fx.ResumeUserTurns) and effect.commit_pending,
                    report=self.report_failure,
                )
        else:
            outcome.lever_returned()
        finally:
            self._running = previous
            self._outcome = previous_outcome

    # -- services for the running lever (the port's) ------------------------------------

    @property
    def lever_running(self) -> bool:
        """A lever runs now (what LiveKit does meanwhile is turnfsm's doing)."""
        return self._running is not None

    def speech_created(self, speech_id: str) -> None:
        """A speech was created: the running lever's, if it made none before (its outcome
        follows that speech)."""
        if self._outcome is not None and self._outcome.speech_id is None:
            self._outcome.speech_id = speech_id

    def note_outcome_detail(self, detail: str) -> None:
        """For a lever: how it carried out its effect, said in its ``done`` outcome."""
        if self._outcome is None:
            raise RuntimeError("note_outcome_detail() is for a running lever")
        self._outcome.done_detail = detail

    def note_cut(self, *, text_chars: int, heard_chars: int) -> None:
        """For a drop lever: the lengths it measured of the message it cut and of what it
        kept (the words heard), said in its ``done`` outcome."""
        if self._outcome is None:
            raise RuntimeError("note_cut() is for a running lever")
        self._outcome.cut = (text_chars, heard_chars)

    def defer_outcome(self) -> PendingOutcome:
        """For a lever: its outcome is reported later, by its call site (``resolve``)."""
        if self._outcome is None:
            raise RuntimeError("defer_outcome() is for a running lever")
        return self._outcome.defer()

    def track(self, awaitable: Awaitable[Any], what: str, *, hang_up: bool = False) -> None:
        """Keep a lever's future alive and log its failure instead of losing it (as a
        failure of the lever that started it, with its effect and state). Detaching
        cancels it, unless it is a ``hang_up`` (``end_call``'s), which runs to its end."""
        future = asyncio.ensure_future(awaitable)
        tasks = self._hang_ups if hang_up else self._tasks
        tasks.add(future)
        if self._outcome is not None:
            self._outcome.track(future)
        where, detail = what, "awaited lever"
        if self._running is not None:
            effect, state = self._running
            where, detail = f"lever {effect.name}", f"{self._describe(effect, state)}, {what}"

        def done(fut: asyncio.Future[Any]) -> None:
            tasks.discard(fut)
            if not fut.cancelled() and (error := fut.exception()) is not None:
                self.report_failure(where, error, detail)

        future.add_done_callback(done)

    # -- the failure log ----------------------------------------------------------------

    def _describe(self, effect: fx.Effect, state: str) -> str:
        """The effect for a log line: its transcript text only if the controller keeps it."""
        return f"{redact(effect, keep_text=self.controller.keep_text)!r} in {state}"

    def _controller_failed(self, event: ev.Event, state: str, error: Exception) -> None:
        """Log a failing controller step with its traceback. Its message may quote the call
        (an invariant violation lists the step's effects): it is redacted unless kept."""
        shown = redact(error, keep_text=self.controller.keep_text)
        name = type(error).__name__
        if invariant := getattr(error, "invariant", None):
            name = f"{name} {invariant}"
        logger.error(
            "turnfsm: controller failed on %s in %s: %r\n%s",
            event.name,
            state,
            shown,
            "".join(traceback.format_tb(error.__traceback__)).rstrip(),
            extra={"event": event.name, "state": state, "error": name},
        )

    def report_failure(self, where: str, error: BaseException, detail: str) -> None:
        """Log a failure of a lever, a handler or an observer once per error type, its
        message redacted unless text is kept (a plugin's error may quote its input)."""
        shown = redact(error, keep_text=self.controller.keep_text)
        key = (where, type(error))
        if key in self._reported_failures:
            logger.debug(
                "turnfsm: %s failed again: %r",
                where,
                shown,
                extra={"where": where, "error": type(error).__name__},
            )
            return
        self._reported_failures.add(key)
        logger.warning(
            "turnfsm: %s failed (%s): %r",
            where,
            detail,
            shown,
            extra={"where": where, "error": type(error).__name__},
        )

    def release_input(self, *, commit: bool = False) -> None:
        """The caller is heard again, whatever happened (:func:`~.levers.release_input`)."""
        release_input(self.port, commit=commit, report=self.report_failure)

    def guarded(
        self, name: str, handler: Callable[[Any], _R], *, session_event: bool = True
    ) -> Callable[[Any], _R | None]:
        """``handler`` as a LiveKit callback: its failure is logged, never raised into the
        session (``None`` then); its event is the one its steps answer (:attr:`site`).
        A ``session_event`` keeps the session from being quiet (O7)."""

        def guarded(event: Any) -> _R | None:
            if session_event and self.attached:
                self.outcomes.agreement.activity()
            self._handling += 1
            site, self.site = self.site, event
            try:
                try:
                    result = handler(event)
                finally:
                    self._handling -= 1
                    self.site = site
                if not self._handling:  # strict: a breach, once the handler did its work
                    self.outcomes.raise_pending()
                return result
            except Exception as error:
                self.report_failure(f"handler {name}", error, type(event).__name__)
                return None

        guarded.__signature__ = _ONE_EVENT  # type: ignore[attr-defined]
        return guarded

    def guarded_call(self, name: str, call: Callable[[], object]) -> None:
        """Run ``call`` as a LiveKit callback would be (:meth:`guarded`): its failure, or
        a strict outcome breach, is logged and never raised into the event loop."""
        self.guarded(name, lambda _: call(), session_event=False)(None)
