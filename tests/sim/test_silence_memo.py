"""The simulation's silero VAD answers a call's opening silence from memory: bit for bit
what the model itself answers, for every window (fast: no session)."""

from __future__ import annotations

import numpy as np
from livekit.plugins.silero import onnx_model

from turnfsm.adapters.sim import load_silero_vad
from turnfsm.adapters.sim.session import SilenceMemo
from turnfsm.adapters.sim.speech import get_line

WINDOW = 512
SILENCE = np.zeros(WINDOW, dtype=np.float32)


def _speech_windows(count: int) -> list[np.ndarray]:
    samples = get_line("hello").samples.astype(np.float32) / np.iinfo(np.int16).max
    return [samples[i * WINDOW : (i + 1) * WINDOW] for i in range(count)]


def _model(session: object) -> onnx_model.OnnxModel:
    return onnx_model.OnnxModel(onnx_session=session, sample_rate=16000)


def _listen(model: onnx_model.OnnxModel, windows: list[np.ndarray]) -> list[float]:
    return [model(window) for window in windows]


def _call(silence_before: int, silence_after: int = 20) -> list[np.ndarray]:
    """A call's input: silence, speech, silence."""
    return [SILENCE] * silence_before + _speech_windows(12) + [SILENCE] * silence_after


def test_every_answer_is_the_models_own_and_the_opening_silence_comes_from_memory() -> None:
    memo = load_silero_vad()._onnx_session  # type: ignore[attr-defined]
    assert isinstance(memo, SilenceMemo)  # the simulation's VAD is the memoized one
    plain, remembering = _model(memo._session), _model(SilenceMemo(memo._session))
    memory = remembering._sess
    # calls whose caller speaks first after 1.3, 0.8 and 1.9 s: the first teaches the memo
    # 40 windows of silence, which the second finds there; the third, 40 of its 60
    remembered = {40: 0, 25: 25, 60: 40}
    for opening, hits in remembered.items():
        for model in (plain, remembering):
            model.reset()  # as LiveKit's VAD stream does on a flush: zeroes the state in place
        hits_before = memory.hits
        expected = _listen(plain, _call(opening))
        assert _listen(remembering, _call(opening)) == expected  # floats, compared exactly
        assert np.array_equal(remembering._rnn_state, plain._rnn_state)
        assert memory.hits - hits_before == hits
    assert len(memory._answers) == 60  # only the opening silence is kept, once


def test_silence_after_speech_and_signed_zeros_run_the_model() -> None:
    session = load_silero_vad()._onnx_session._session  # type: ignore[attr-defined]
    memory = SilenceMemo(session)
    plain, remembering = _model(session), _model(memory)
    negative_zeros = np.full(WINDOW, -0.0, dtype=np.float32)  # not the bytes of silence
    windows = _speech_windows(8) + [SILENCE] * 10 + [negative_zeros] * 3
    for _ in range(2):
        plain.reset()
        remembering.reset()
        assert _listen(remembering, windows) == _listen(plain, windows)
    assert memory.hits == 0
    assert not memory._answers


def test_the_memo_keeps_at_most_its_limit() -> None:
    session = load_silero_vad()._onnx_session._session  # type: ignore[attr-defined]
    memory = SilenceMemo(session, limit=5)
    plain, remembering = _model(session), _model(memory)
    for _ in range(2):
        plain.reset()
        remembering.reset()
        assert _listen(remembering, [SILENCE] * 9) == _listen(plain, [SILENCE] * 9)
    assert len(memory._answers) == 5
    assert memory.hits == 5
