"""turnfsm benchmarks: ``python -m benchmarks`` (``make bench``); see run.py."""
