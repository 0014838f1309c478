"""Regenerate the recorded callee lines with espeak-ng and sox: the demo's (shipped,
``adapters/sim/audio/``) and the tests' (``tests/support/audio/``).

The WAVs are committed: tests and the demo never run this script, and CI has neither
espeak-ng nor sox. Run it only after changing :data:`turnfsm.adapters.sim.speech.LINES`
or :data:`support.lines.TEST_LINES`, from ``tests/``::

    ../.venv/bin/python -m support.make_audio            # every line
    ../.venv/bin/python -m support.make_audio stop hello # some lines

Each line is spoken by espeak-ng (voice ``en-us``, the line's ``espeak_speed``), trimmed of
leading and trailing silence and converted to 16 kHz mono 16-bit by sox. A faint,
deterministic noise floor (about -72 dBFS) is then added, as on a real phone line, so no
frame of a recording is digitally silent: the scripted STT treats all-zero frames as audio
that the session silenced.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import wave
import zlib
from pathlib import Path

import numpy as np

from turnfsm.adapters.sim.speech import LINES, SAMPLE_RATE, SpeechLine, add_lines

from support.lines import TEST_LINES

NOISE_FLOOR_RMS = 8.0
"""Standard deviation of the added noise floor, in int16 units."""


def record_line(line: SpeechLine, destination: Path) -> float:
    """Record ``line`` into ``destination`` and return its duration in seconds.

    Raises:
        subprocess.CalledProcessError: If espeak-ng or sox fails.
    """
    with tempfile.TemporaryDirectory() as scratch:
        spoken = Path(scratch) / "spoken.wav"
        trimmed = Path(scratch) / "trimmed.wav"
        subprocess.run(
            [
                "espeak-ng",
                "-v",
                "en-us",
                "-s",
                str(line.espeak_speed),
                "-w",
                str(spoken),
                line.text,
            ],
            check=True,
        )
        silence_trim = ["silence", "1", "0.02", "0.3%"]
        subprocess.run(
            ["sox", str(spoken), "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(trimmed)]
            + silence_trim
            + ["reverse"]
            + silence_trim
            + ["reverse"],
            check=True,
        )
        with wave.open(str(trimmed), "rb") as wav:
            samples = np.frombuffer(wav.readframes(wav.getnframes()), dtype=np.int16)

    rng = np.random.default_rng(zlib.crc32(line.name.encode()))
    noise = rng.normal(0.0, NOISE_FLOOR_RMS, size=len(samples))
    noisy = np.clip(samples.astype(np.float64) + noise, -32768, 32767).astype(np.int16)
    noisy[noisy == 0] = 1  # no digitally silent frame, even a short one

    with wave.open(str(destination), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(SAMPLE_RATE)
        wav.writeframes(noisy.tobytes())
    return len(noisy) / SAMPLE_RATE


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: record the named lines, or all of them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="lines to record (default: all)")
    args = parser.parse_args(argv)
    add_lines(*TEST_LINES)
    names = args.names or sorted(LINES)
    for name in names:
        line = LINES[name]
        line.path.parent.mkdir(parents=True, exist_ok=True)
        duration = record_line(line, line.path)
        print(f"{line.path.name}: {duration:.2f} s  {line.text!r}")


if __name__ == "__main__":
    main()
