"""Issue 21 point 4, issue 19 point 4: one answer to "what was heard" for both levers
(adapters/livekit/heard.py), and an outcome monitor (O4) that measures it on its own."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import replace

import pytest
from livekit.agents import llm

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.livekit import heard, levers, realtime
from turnfsm.adapters.livekit.port import LeverPort
from turnfsm.adapters.livekit.realtime import RealtimeLink
from turnfsm.adapters.livekit.text import estimated_seconds
from turnfsm.adapters.sim.realtime import FIDELITY_MATRIX
from turnfsm.events import EffectOutcome
from turnfsm.spoken import spoken_prefix

from support.realtime_calls import scripted_model, served_call, words_heard

ANSWER = (
    "Our shop opens at nine and closes at six on weekdays, and on Saturdays "
    "it opens at ten and closes at four, except on public holidays."
)


def test_both_levers_cut_by_the_one_heard_text() -> None:
    """Neither lever module keeps a rule of its own: both reach :mod:`.heard`."""
    assert levers.heard is heard
    assert realtime.heard_of_model is heard.heard_of_model
    for module in (levers, realtime):
        assert not hasattr(module, "spoken_prefix")
        assert not hasattr(module, "_one_word_earlier")


def test_a_streaming_reply_is_cut_at_the_slowest_rate_one_word_earlier() -> None:
    text = "one two three four five six seven eight"  # 39 characters
    rates = heard.SpeakingRates()
    # 2 s came, 1.9 s played; its own rate measured at 13 a second: the cut at character
    # 24.7 ("five" ends at 23), one word earlier
    playout = heard.Playout(text, 1.9, 2.0, complete=False, rate=13.0)
    assert heard.heard_text(playout, rates) == "one two three four"
    # an earlier reply of the voice spoke 10 a second: the cut at 19, after "four"
    rates.heard_whole("x" * 30, 3.0)
    assert heard.heard_text(playout, rates) == "one two three"
    # once all of it came (3 s), its own length places the cut, no word earlier
    whole = heard.Playout(text, 1.9, 3.0, complete=True)
    assert heard.heard_text(whole, rates) == "one two three four five"


def test_timed_pieces_place_the_cut_and_only_the_last_one_is_estimated() -> None:
    pieces = ((0.0, "One two."), (2.0, " Three four five six."))
    measured = heard.Playout("", 3.0, 4.0, complete=True, timed=pieces)
    assert heard.heard_text(measured, heard.SpeakingRates()) == "One two. Three"
    # 1.5 s of the last piece came: whole, "four" played to its end (the cut at 14 of
    # its 21 characters); still coming, its length is estimated (at its own rate, 14 a
    # second, the slowest) and the cut made one word earlier
    whole = replace(measured, audio_seconds=3.5)
    assert heard.heard_text(whole, heard.SpeakingRates()) == "One two. Three four"
    streaming = replace(whole, complete=False)
    assert heard.heard_text(streaming, heard.SpeakingRates()) == "One two. Three"


def test_a_model_items_rate_is_its_transcripts_growth_over_its_audio() -> None:
    """The transcript runs 2 s ahead of the audio at 12 characters a second: its text over
    its audio says 18 a second, its growth 12; all of it came after 3 s: the growth is
    measured up to there."""
    item = heard.ModelItem()
    item.add_text("x" * 24)
    for second in range(6):
        item.add_text("x" * 12 if second < 3 else "")
        item.add_audio(1.0)
    assert item.transcript == "x" * 60
    assert item.rate() == 12.0
    short = heard.ModelItem()
    short.add_text("x" * 30)
    short.add_audio(0.5)
    assert short.rate() is None  # too little audio to measure on


def _at_the_standard_rate(
    link: RealtimeLink, port: LeverPort, effect: fx.DropUnspokenText, message: llm.ChatMessage
) -> str:
    """A wrong cut: the item's audio length taken as LiveKit's standard rate says (as for
    a reply whose audio never all came), although all of it came, and this voice is
    slower than that rate."""
    segment = port.last_segment.get(effect.speech_id)
    item = link.item(message.id)
    if segment is None or item is None:
        return ""
    text = item.transcript  # the model's (LiveKit committed the synchronizer's prefix)
    return spoken_prefix(text, segment.played_seconds, estimated_seconds(text))


@pytest.mark.parametrize("cut", ["heard", "standard-rate"])
async def test_the_outcome_monitor_catches_a_wrong_cut_of_the_levers_own_rule(cut: str) -> None:
    """A slow voice (11 characters a second) whose audio all came, cut by a barge-in 6 s
    in, LiveKit's transcript synchronizer in the chain. The link's ``heard`` rule swapped
    for a wrong one keeps unheard words, and O4 reports it: the monitor measures the
    heard words itself (was: it asked that same rule, so it agreed with any wrong cut
    made there). The link's own rule keeps none, and O4 stays quiet."""
    fidelity = replace(FIDELITY_MATRIX["no-latency"], generation_speed=4.0)
    async with served_call(fidelity, chars_per_second=11.0) as call:
        server = call.server
        server.script.policy = scripted_model([ANSWER, "Sure."])
        session, adapter, _ = await call.start(
            TurnPolicy(direction="inbound", first_speaker="user"), transcript_sync=True
        )
        adapter.outcomes.strict = False  # reported, not raised
        assert adapter.realtime is not None
        if cut == "standard-rate":
            adapter.realtime.heard = functools.partial(  # type: ignore[method-assign]
                _at_the_standard_rate, adapter.realtime
            )
        handle = session.generate_reply(user_input="When are you open?")
        answer = await call.segment_playing(0)
        await call.played(answer, 6.0)
        call.microphone.speak(0.5)
        await asyncio.wait_for(handle, 10)
        await asyncio.sleep(0.5)
        (message,) = [
            m for m in session.history.items if m.id == server.responses[0].message_item_id
        ]
        assert isinstance(message, llm.ChatMessage)
        kept = len((message.text_content or "").split())
        played_to_their_end = len(words_heard(server, ANSWER, answer.played))
        # the lever's outcome tells the cut it made, in lengths: what the history keeps
        assert adapter.controller.trace is not None
        (measured,) = [
            s.event
            for s in adapter.controller.trace.steps
            if isinstance(s.event, EffectOutcome) and s.event.effect == "drop_unspoken_text"
        ]
        assert measured.outcome == "done"
        assert measured.heard_chars == len(message.text_content or ""), measured
        assert measured.text_chars == len(ANSWER), measured  # the model's whole transcript
        o4 = [str(b) for b in adapter.outcomes.breaches if b.check == "O4"]
        if cut == "standard-rate":
            assert kept >= played_to_their_end + 2  # the wrong cut kept unheard words
            assert len(o4) == 1, o4
        else:
            assert played_to_their_end - 2 <= kept <= played_to_their_end
            assert o4 == []
