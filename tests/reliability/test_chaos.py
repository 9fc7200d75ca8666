"""The chaos soak in small (bench/chaos.py): three kills of the tiny config, one of each kind
of moment (SIGTERM during start-up, SIGKILL while a checkpoint is being written, SIGTERM
between steps), each resumed; the end result must be the uninterrupted run's, bit for bit.
The full soak (20 random kills) is `python -m bench.chaos`.
"""

import signal

from bench import chaos
from tests.reliability import runner


def test_three_kills_resume_bitwise(tmp_path):
    plan = [chaos.Kill(signal.SIGTERM, "start-up", 0.0),
            chaos.Kill(signal.SIGKILL, "save", 2),
            chaos.Kill(signal.SIGTERM, "step", 3)]
    res = chaos.soak(str(tmp_path), steps=6, plan=plan, log=lambda line: None,
                      env=runner.make_env())
    report = chaos.report(res)
    assert res.ok, report
    assert [k.hit for k in res.kills][0].startswith(("start-up", "compile")), report
    assert res.kills[1].hit == "during a save", report
    assert res.kills[2].hit.startswith("after step"), report
