import ml_collections
import numpy as np

from posjax.data.random_batch import random_batch


def test_random_batch_follows_the_batch_contract():
    config = ml_collections.ConfigDict({"data": {"batch_size": 4, "seq_len": 32},
                                        "model": {"vocab_size": 50, "sop": True}})
    batch = random_batch(config, np.random.default_rng(0), mask_rate=0.5)
    for key in ("input_ids", "token_type_ids", "positions", "segment_ids", "mlm_targets"):
        assert batch[key].shape == (4, 32) and batch[key].dtype == np.int32
    assert batch["input_ids"].min() >= 5 and batch["input_ids"].max() < 50
    np.testing.assert_array_equal(batch["positions"][2], np.arange(32))
    chosen = batch["mlm_weights"] > 0
    np.testing.assert_array_equal(batch["mlm_targets"][chosen], batch["input_ids"][chosen])
    assert (batch["mlm_targets"][~chosen] == 0).all() and 0.3 < chosen.mean() < 0.7
    assert batch["sop_labels"].shape == (4,)
