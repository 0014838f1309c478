"""What each lever did with its effect, reported back to the machine as ``EffectOutcome``.

Every effect the adapter executes ends in exactly one outcome, dispatched in the same
run-to-completion queue as LiveKit's events (after the effects of the current step):

=========  ==========================================================================
outcome    when
=========  ==========================================================================
done       the lever returned, and every future it started (``port.track``)
           resolved; or, for a deferred outcome, the lever's call site confirmed it
           (the turn hook whose reply carries the greeting let LiveKit reply);
           ``detail`` says how, where it matters (``audio: pre-rendered``); a
           drop's outcome says what it measured of the cut message
           (``text_chars``, ``heard_chars``)
refused    LiveKit declined: the lever raised :class:`EffectRefused` (an interrupt of a
           speech that does not allow interruptions, a lock of an interrupted speech),
           or a deferred outcome was refused (the turn hook stopped the reply that
           was to carry the greeting)
failed     the lever, or a future it started, raised; ``detail`` is the error's type;
           or a realtime greeting started and did not finish (its response cancelled,
           failed, left incomplete, or its connection lost): ``detail`` starts with
           :data:`UNFINISHED`
=========  ==========================================================================

``detail`` never carries transcript text, nor does any outcome: a cut is told in lengths.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from turnfsm import effects as fx
from turnfsm import events as ev

UNFINISHED = "unfinished"
"""The ``detail`` of a greeting that played in part: the model did not finish it."""


class EffectRefused(Exception):
    """Raised by a lever when LiveKit declined the effect: an outcome, not a failure."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class PendingOutcome:
    """The outcome of one effect, reported once the lever and its futures are through."""

    def __init__(
        self,
        effect: fx.Effect,
        report: Callable[[ev.EffectOutcome], object],
        now: Callable[[], float],
    ) -> None:
        self.effect = effect
        self.speech_id: str | None = getattr(effect, "speech_id", None) or None
        """The speech the effect was about (set by the adapter when the lever creates one)."""
        self._report = report
        self._now = now
        self._returned = False
        self._deferred = False
        self._futures = 0
        self._failure: str | None = None
        self.done_detail = ""
        """What a ``done`` outcome says of how the lever did it (never transcript text):
        e.g. whether a speech's audio was pre-rendered (:mod:`.prerender`)."""
        self.cut: tuple[int, int] | None = None
        """What a ``done`` drop measured: ``(text_chars, heard_chars)``."""
        self.reported = False

    def track(self, future: asyncio.Future[Any]) -> None:
        """The outcome waits for ``future`` too; its exception makes it ``failed``."""
        self._futures += 1
        future.add_done_callback(self._future_done)

    def defer(self) -> PendingOutcome:
        """The lever's call site reports the outcome later, with :meth:`resolve`."""
        self._deferred = True
        return self

    def resolve(self, outcome: ev.EffectOutcomeKind, detail: str = "") -> None:
        """Report a deferred outcome."""
        self._deferred = False
        if outcome == "done":
            self._maybe_done()
        else:
            self._finish(outcome, detail)

    def lever_returned(self) -> None:
        self._returned = True
        self._maybe_done()

    def lever_refused(self, detail: str) -> None:
        self._finish("refused", detail)

    def lever_failed(self, error: BaseException) -> None:
        self._finish("failed", type(error).__name__)

    def _future_done(self, future: asyncio.Future[Any]) -> None:
        self._futures -= 1
        if future.cancelled():
            self._failure = self._failure or "CancelledError"
        elif (error := future.exception()) is not None:
            self._failure = self._failure or type(error).__name__
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self._returned and not self._deferred and self._futures == 0:
            if self._failure is not None:
                self._finish("failed", self._failure)
            else:
                self._finish("done", self.done_detail, self.cut)

    def _finish(
        self, outcome: ev.EffectOutcomeKind, detail: str, cut: tuple[int, int] | None = None
    ) -> None:
        if self.reported:
            return
        self.reported = True
        text_chars, heard_chars = cut if cut is not None else (None, None)
        self._report(
            ev.EffectOutcome(
                at=self._now(),
                effect=self.effect.name,
                outcome=outcome,
                speech_id=self.speech_id,
                detail=detail,
                text_chars=text_chars,
                heard_chars=heard_chars,
            )
        )
