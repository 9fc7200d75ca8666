"""FLOPs formula on BERT-base numbers, the signal handler's first/second signal behaviour."""

import os
import signal

import ml_collections

from posjax.training import progress, signals


def test_bert_base_flops_per_step():
    m = ml_collections.ConfigDict(dict(hidden=768, num_layers=12, num_heads=12, head_dim=None,
                                       mlp_dim=3072, embedding_dim=None, vocab_size=30522,
                                       causal=False, activation="gelu"))
    config = ml_collections.ConfigDict({"model": m})
    b, l = 2, 512
    t = b * l
    n = 12 * (4 * 768 * 768 + 2 * 768 * 3072) + 768 * 768  # 85.5M matmul weights
    expected = 6 * n * t + 12 * 12 * l * 768 * t + 6 * t * 768 * 30522
    assert progress.training_flops_per_step(config, b, l) == expected
    # The MLM head (transform + logits) at 20 places per row instead of 512.
    head = 6 * (768 * 768 + 768 * 30522)
    assert progress.training_flops_per_step(config, b, l, 20) == expected - head * b * (l - 20)
    m.causal = True
    assert progress.training_flops_per_step(config, b, l) == expected - 6 * 12 * l * 768 * t
    # A gated MLP (model.mlp='glu': GeGLU / SwiGLU) has a third hidden x mlp matrix per layer.
    m.causal = False
    m.mlp = "glu"
    gated = progress.training_flops_per_step(config, b, l)
    assert gated == expected + 6 * 12 * 768 * 3072 * t


def test_first_signal_sets_flag_and_handlers_are_restored():
    before = signal.getsignal(signal.SIGTERM)
    with signals.GracefulStop() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.signal_name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before
