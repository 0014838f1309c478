"""``turnfsm fuzz``: whole calls drawn from a seed, run on the virtual clock, judged.

* :mod:`.draw` — what a call draws (:func:`~.draw.draw_call`: a :class:`~.draw.CallPlan`);
* :mod:`.harness` — running one in a real ``AgentSession`` (:func:`~.harness.run_call`);
* :mod:`.judge` — what it is judged on (:func:`~.judge.judge_call`);
* :mod:`.runner` — many calls on a process pool, a replay, the command line.
"""

from .draw import CallPlan, draw_call
from .harness import CallRecord, run_call
from .judge import JUDGEMENTS, Finding, judge_call

__all__ = [
    "JUDGEMENTS",
    "CallPlan",
    "CallRecord",
    "Finding",
    "draw_call",
    "judge_call",
    "run_call",
]
