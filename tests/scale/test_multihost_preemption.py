"""Multi-host preemption with the 2-process loopback harness (train.py twice, gloo collectives
on 127.0.0.1, as tests/scale/test_scale_runs.py): SIGTERM reaches ONE process (process 1,
which prints nothing); both must stop after the same step and save it together (orbax saves
are collective: a disagreement would hang until the test's timeout), exit 0, and process 0
must report the stop. Then the checkpoint resumes on a different shape: one process."""

import re
import signal
import socket
import threading

from tests.reliability import runner
import pytest

# Slow tier: several processes or simulated devices (meshes).
pytestmark = pytest.mark.slow

STEPS = 3000  # never reached: the signal comes after step 3 (tiny steps take milliseconds)
ARGS = runner.tiny_args(STEPS, checkpoint_every=STEPS)  # no periodic save: only the stop saves
STOPPED = re.compile(r"^SIGTERM: stopped after step (\d+); checkpoint of step \1 saved in ")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_to_one_process_stops_both_at_one_step_and_resumes_on_one(tmp_path):
    env = runner.make_env()
    wd = str(tmp_path / "run")
    port = _port()
    procs = [runner.Run(ARGS + [f"--workdir={wd}", f"--coordinator_address=127.0.0.1:{port}",
                                "--num_processes=2", f"--process_id={i}"], env)
             for i in range(2)]
    drain = threading.Thread(target=procs[1].watch, args=([],), daemon=True)
    drain.start()  # process 1's pipe must not fill up
    code0 = procs[0].watch([(runner.after_step(3), lambda _: procs[1].signal(signal.SIGTERM))])
    drain.join(timeout=300)
    code1 = procs[1].proc.wait(timeout=60)
    assert (code0, code1) == (0, 0), procs[0].text[-3000:] + "\n---\n" + procs[1].text[-3000:]
    stopped = [m for m in map(STOPPED.match, procs[0].lines) if m]
    assert len(stopped) == 1, procs[0].text[-3000:]
    step = int(stopped[0].group(1))
    assert 3 <= step < STEPS
    assert runner.checkpoint_steps(wd) == [step]  # one save, of the same step by both

    # another shape: one process, one device, two more steps from the saved one
    code, text = runner.run(ARGS[:1] + [f"--config.train.steps={step + 2}"] + ARGS[2:]
                            + [f"--workdir={wd}"], env)
    assert code == 0, text[-3000:]
    assert f"resuming from step {step} in " in text
    assert f"done: step {step + 2}" in text
    assert runner.checkpoint_steps(wd)[-1] == step + 2
