"""The tools around the turn machine: they read a chart, a policy or traces, never run a call.

- :mod:`.cli`: the ``turnfsm`` command (``python -m turnfsm``);
- :mod:`.check`: ``turnfsm check``, a user's own policy or chart explored;
- :mod:`.diagram`: state diagrams of the chart, per policy, with a trace's overlay;
- :mod:`.timeline`: one call drawn on a time axis;
- :mod:`.metrics`: a call's figures from its trace (the adapter's telemetry reports them);
- :mod:`.report`: a thousand calls' traces in one page;
- :mod:`.escape`: text made safe for the formats they write.

The machine itself (the chart, its rules, the controller, events, effects, the policy,
the trace) is the package around this one; ``turnfsm.adapters`` runs it in LiveKit.
"""
