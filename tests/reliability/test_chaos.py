"""The chaos soak's own logic (tests/reliability/chaos.py), without processes: how kills are drawn, where a
signal is said to have landed, how a kill's outcome is judged and reported. The kills
themselves (start-up, mid-save, between steps, each resumed bit for bit) run in
test_preemption.py; the full soak is `python -m tests.reliability.chaos`.
"""

import random
import signal

from tests.reliability import chaos
import pytest

# Slow tier: a soak of random faults.
pytestmark = pytest.mark.slow


def test_draws_are_seeded_and_aim_past_the_latest_checkpoint():
    a = [chaos._draw(random.Random(3), last, 40, 6.0) for last in range(0, 30, 3)]
    b = [chaos._draw(random.Random(3), last, 40, 6.0) for last in range(0, 30, 3)]
    assert [(k.sig, k.phase, k.at) for k in a] == [(k.sig, k.phase, k.at) for k in b]
    rng = random.Random(0)
    for _ in range(200):
        last = rng.randint(0, 36)
        k = chaos._draw(rng, last, 40, 6.0)
        assert k.sig in (signal.SIGTERM, signal.SIGKILL) and k.phase in chaos.PHASES
        if k.phase == "start-up":
            assert 0.0 <= k.at <= 0.8 * 6.0
        else:
            assert last + 1 <= k.at <= min(38, last + 3)
    # no step left to aim at: start-up
    assert chaos._draw(random.Random(0), 38, 40, 6.0).phase == "start-up"


def test_where_a_signal_landed():
    assert chaos._landed([], True) == "during a save"
    assert chaos._landed(["loading data"], False) == "start-up (data/restore)"
    assert chaos._landed(["resuming from step 4"], False) == "start-up (after restore)"
    assert chaos._landed(["posjax train: 1 params"], False) == "compile"
    lines = ["posjax train: 1 params", "step 1 | loss 3.0", "step 2 | loss 2.9"]
    assert chaos._landed(lines, False) == "after step 2"


def test_kill_outcomes_are_judged():
    def judge(sig, hit, code, text):
        k = chaos.Kill(sig, "step", 2, hit=hit)
        chaos._check_kill(k, code, text)
        return k.problem
    stopped = "SIGTERM: stopped after step 2; checkpoint of step 2 saved in /w/checkpoints"
    assert judge(signal.SIGTERM, "after step 2", 0, stopped) == ""
    assert judge(signal.SIGTERM, "after step 2", 1, stopped) == "exit 1 after SIGTERM, expected 0"
    assert "no 'stopped" in judge(signal.SIGTERM, "after step 2", 0, "done?")
    assert judge(signal.SIGKILL, "during a save", -signal.SIGKILL, "") == ""
    assert "expected killed" in judge(signal.SIGKILL, "during a save", 0, "")
    assert judge(signal.SIGTERM, "compile", 0, "Traceback (most recent call last)") \
        == "traceback in the output"


def test_report_counts_kills_by_signal_and_moment():
    kills = [chaos.Kill(signal.SIGTERM, "step", 2, hit="after step 2"),
             chaos.Kill(signal.SIGKILL, "save", 3, hit="during a save"),
             chaos.Kill(signal.SIGTERM, "step", 5, hit="after step 5", problem="exit 1")]
    text = chaos.report(chaos.Result(kills, 6, 1, [], ["kill 3: exit 1"], 1.0))
    assert "kills survived: 2/3" in text
    assert "2 SIGTERM between steps" in text and "1 SIGKILL during a save" in text
    assert "steps lost (recomputed after a kill): 1 of 6" in text
