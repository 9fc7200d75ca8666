"""posjax.memory: the estimate grows with the length, refuses an absurd one and names the
largest that fits, accepts a small one (pure arithmetic: no JAX, no allocation)."""

import pytest

from posjax import memory
from posjax.attention import rows
from posjax.errors import ConfigError

MODEL = {"hidden": 768, "num_heads": 12, "mlp_dim": 3072, "attention": "auto",
         "block_q": 128, "block_k": 128}
PARAMS = 110_000_000 * 4  # BERT-base


def need(n):
    return memory.estimate_bytes(MODEL, batch=1, length=n, params_bytes=PARAMS)


def test_monotone_in_length_and_batch():
    lengths = [1, 2, 64, 512, 1023, 1024, 1025, 4096, 10**6, 10**8]
    values = [need(n) for n in lengths]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert need(1) > PARAMS  # parameters are always counted
    # the full score matrix up to 1024 keys ('auto' = reference there) dominates at 1024
    assert need(1024) - PARAMS > 3 * 12 * 1024 * 1024 * 4
    assert (memory.estimate_bytes(MODEL, batch=8, length=512, params_bytes=PARAMS)
            > memory.estimate_bytes(MODEL, batch=4, length=512, params_bytes=PARAMS))
    # chunked past 1024: linear in the length (one tile, whatever the length)
    assert need(3 * 10**6) - need(2 * 10**6) == need(2 * 10**6) - need(10**6)


def test_refuses_absurd_length_naming_the_limit():
    with pytest.raises(ConfigError) as e:
        memory.check_fits("max_length", 100_000_000, need, available=16 * memory.GIB)
    msg = str(e.value)
    assert msg.startswith("max_length=100000000 is not allowed: <= "), msg
    limit = int(msg.split("<= ")[1].split(" ")[0].replace(",", ""))
    budget = int(16 * memory.GIB * memory.BUDGET_FRACTION)
    assert need(limit) <= budget < need(limit + 1)  # exactly the largest length that fits
    assert "16.0 GiB is free" in msg
    memory.check_fits("max_length", limit, need, available=16 * memory.GIB)  # accepted


def test_accepts_small_length_on_this_machine():
    memory.check_fits("max_length", 512, need)  # BERT-base at 512 fits any machine posjax runs on
    assert memory.available_bytes() > 0


def test_bounds_the_rows_block_and_is_linear_in_batch_below_the_fill():
    """The tile counted covers the query block rows really runs (it grows to fill
    rows.BLOCK_ELEMENTS from FILL_FROM_KEYS on), and below that length many rows cost
    exactly many times one row: encode()'s batch check divides by the one-row estimate."""
    def tile(batch, length):  # the estimate less the parameters
        return memory.estimate_bytes(MODEL, batch=batch, length=length, params_bytes=0)

    for batch in (1, 2, 8, 64):
        for length in (1023, 1024, 1536, 2048, 2049, 8192, 16384):
            block = rows.query_block(128, batch, 12, length, length, fill=True)
            assert tile(batch, length) >= 3 * batch * 12 * block * length * 4, (batch, length)
    one = tile(1, 256)
    assert tile(1000, 256) == 1000 * one
    assert tile(64, 1023) == 64 * tile(1, 1023)
    # monotone in both across the evened-out block's dips (2048 -> 2049 keys halves it)
    for batch in (1, 3):
        values = [tile(batch, n) for n in (1023, 1024, 2048, 2049, 4096, 4097, 8192)]
        assert values == sorted(values)
    assert tile(3, 2049) > tile(2, 2049) > tile(1, 2049)
