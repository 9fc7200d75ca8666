"""train.py with a non-finite loss injected at one step (a test harness, not a test).

    POSJAX_NAN_AT_STEP=3 PYTHONPATH=. python tests/reliability/nan_train.py --config=... --workdir=...

Fault injection by monkeypatching, so posjax itself carries no testing knob: the train step is
wrapped so that the step numbered POSJAX_NAN_AT_STEP (1-based, as the log counts) sees NaN
MLM weights, which makes its loss and every gradient NaN exactly as a real overflow would.
Everything else is the real train.py (flags, exit codes, messages).
"""

import os
import runpy
import sys

import jax
import jax.numpy as jnp

from posjax.training import state as state_lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NAN_AT = int(os.environ["POSJAX_NAN_AT_STEP"])
_make_train_step = state_lib.make_train_step


def poisoned_train_step(setup, config, batch_sh, **kw):
    step_fn = _make_train_step(setup, config, batch_sh, **kw)

    def step(state, batch, *limit):
        bad = state["step"] == NAN_AT - 1  # state["step"] counts the steps already done
        weights = jnp.where(bad, jnp.nan, batch["mlm_weights"])
        return step_fn(state, dict(batch, mlm_weights=weights), *limit)

    return jax.jit(step, donate_argnums=(0,))


state_lib.make_train_step = poisoned_train_step
sys.argv = [os.path.join(REPO, "train.py")] + sys.argv[1:]
runpy.run_path(os.path.join(REPO, "train.py"), run_name="__main__")
