"""The simulation's silero VAD answers inputs it has met before from memory: bit for bit
what the model itself answers, for every window (fast: no session)."""

from __future__ import annotations

import numpy as np
from livekit.plugins.silero import onnx_model

from turnfsm.adapters.sim import load_silero_vad
from turnfsm.adapters.sim.session import InferenceMemo
from turnfsm.adapters.sim.speech import get_line

WINDOW = 512
SILENCE = np.zeros(WINDOW, dtype=np.float32)


def _speech_windows(count: int, line: str = "hello") -> list[np.ndarray]:
    samples = get_line(line).samples.astype(np.float32) / np.iinfo(np.int16).max
    return [samples[i * WINDOW : (i + 1) * WINDOW] for i in range(count)]


def _model(session: object) -> onnx_model.OnnxModel:
    return onnx_model.OnnxModel(onnx_session=session, sample_rate=16000)


def _raw_session() -> object:
    return load_silero_vad()._onnx_session._session  # type: ignore[attr-defined]


def _call(silence_before: int, line: str = "hello", silence_after: int = 20) -> list[np.ndarray]:
    """A call's input: silence, speech, silence."""
    return [SILENCE] * silence_before + _speech_windows(12, line) + [SILENCE] * silence_after


def _listen_both(
    plain: onnx_model.OnnxModel, remembering: onnx_model.OnnxModel, windows: list[np.ndarray]
) -> None:
    """Both models hear a call from a zeroed state, as LiveKit's VAD stream starts one
    (``reset`` zeroes the state in place), and answer it alike, bit for bit."""
    for model in (plain, remembering):
        model.reset()
    expected = [plain(window) for window in windows]
    assert [remembering(window) for window in windows] == expected  # floats, exactly
    assert np.array_equal(remembering._rnn_state, plain._rnn_state)


def test_every_answer_is_the_models_own_and_inputs_met_twice_come_from_memory() -> None:
    assert isinstance(load_silero_vad()._onnx_session, InferenceMemo)  # type: ignore[attr-defined]
    session = _raw_session()
    memory = InferenceMemo(session)
    plain, remembering = _model(session), _model(memory)
    call = _call(40)
    # a first hearing is only sighted, a second kept, and from the third on remembered
    for hits, kept in ((0, 0), (0, len(call)), (len(call), len(call))):
        hits_before = memory.hits
        _listen_both(plain, remembering, call)
        assert (memory.hits - hits_before, len(memory._answers)) == (hits, kept)
    # a call whose caller speaks sooner shares its opening silence, then nothing: the
    # same speech from another state is another input
    hits_before = memory.hits
    _listen_both(plain, remembering, _call(25))
    assert memory.hits - hits_before == 25
    # another line after the same silence: the silence comes from memory, the line not
    hits_before = memory.hits
    _listen_both(plain, remembering, _call(40, line="question"))
    assert memory.hits - hits_before == 40


def test_inputs_that_differ_in_any_bit_run_the_model() -> None:
    session = _raw_session()
    memory = InferenceMemo(session)
    plain, remembering = _model(session), _model(memory)
    negative_zeros = np.full(WINDOW, -0.0, dtype=np.float32)  # not the bytes of silence
    for _ in range(3):
        _listen_both(plain, remembering, [SILENCE] * 5)
    hits_before, answers = memory.hits, len(memory._answers)
    for _ in range(3):
        _listen_both(plain, remembering, [negative_zeros] * 5)
    assert memory.hits - hits_before == 5  # only their third hearing, from their own answers
    assert len(memory._answers) == answers + 5


def test_the_memo_keeps_at_most_its_limit_and_starts_its_sightings_over() -> None:
    session = _raw_session()
    memory = InferenceMemo(session, limit=5, sightings=10)
    plain, remembering = _model(session), _model(memory)
    for _ in range(3):
        _listen_both(plain, remembering, [SILENCE] * 9)
    assert len(memory._answers) == 5
    assert memory.hits == 5
    sizes = []
    for window in _speech_windows(12):  # 9 sightings and 12 more: the set starts over
        remembering(window)
        sizes.append(len(memory._sighted))
    assert max(sizes) == 10
    assert sizes[-1] < 10
