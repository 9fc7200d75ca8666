"""The algorithmic grid's variants (configs/experiments/algorithmic.py): a probe of chosen
tasks, posjax's other schemes, and which schemes get no randomized twin."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs.experiments import algorithmic
from posjax import positions
from posjax.attention import attend
from posjax.errors import ConfigError
from posjax.positions.base import Dims
def test_a_probe_of_chosen_tasks_is_the_probes_runs_of_those_tasks():
    whole = algorithmic.get_config("probe").runs
    some = algorithmic.get_config("probe,odds_first,bucket_sort").runs
    assert sorted(some) == ["bucket_sort_rope", "odds_first_rope"]
    assert all(some[name].to_dict() == whole[name].to_dict() for name in some)
    with pytest.raises(ConfigError, match="odd_first"):
        algorithmic.get_config("probe,odd_first")


def test_others_is_every_other_scheme_on_the_core_tasks_with_randomized_twins_where_positions_are_read():
    runs = algorithmic.get_config("others").runs
    for task in algorithmic.CORE_TASKS:
        for scheme in algorithmic.OTHER_SCHEMES:
            assert f"{task}_{scheme}_seed2" in runs
            twin = f"{task}_{scheme}_randomized"
            assert (twin in runs) == (scheme not in algorithmic.POSITION_FREE)
    assert not set(algorithmic.OTHER_SCHEMES) & set(algorithmic.SCHEMES)


@pytest.mark.slow  # 20 schemes' attention op by op (~8 s)
def test_position_free_schemes_are_exactly_those_randomized_positions_leave_unchanged():
    """Attention with positions 0..L-1 and with an ordered random subset of [0, 2048) (what a
    randomized run draws): the same output for the POSITION_FREE schemes, another for every
    other scheme that reads positions in attention (an embedding's reads them by definition)."""
    length, heads, dim = 12, 2, 8
    rng = np.random.RandomState(0)
    one = [rng.randn(1, length, heads, dim) for _ in range(3)]
    # row 0 reads positions 0..L-1, row 1 the draw: the same q, k, v in both
    q, k, v = (jnp.asarray(np.concatenate([x, x]), jnp.float32) for x in one)
    pos = jnp.asarray(np.stack([np.arange(length),
                                np.sort(rng.choice(2048, length, replace=False))]))
    dims = Dims(num_heads=heads, head_dim=dim, hidden=heads * dim, max_length=2048)
    for name in algorithmic.SCHEMES + algorithmic.OTHER_SCHEMES:
        scheme = positions.make(name).bind(dims)
        if scheme.embed is not None:
            assert name not in algorithmic.POSITION_FREE
            continue
        params = scheme.init_layer(jax.random.PRNGKey(0))
        out = attend(q, k, v, scheme=scheme, params=params, q_pos=pos, k_pos=pos,
                     implementation="reference")
        same = bool(jnp.allclose(out[0], out[1], rtol=1e-6, atol=1e-6))
        assert same == (name in algorithmic.POSITION_FREE), name
