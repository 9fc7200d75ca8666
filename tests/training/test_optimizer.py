"""LAMB with BERT's exclusions, on the param tree of a real posjax model; the schedule."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from posjax import models
from posjax.errors import ConfigError
from posjax.training import optimizer


def _train(**kw):
    t = ml_collections.ConfigDict(dict(steps=100, learning_rate=1e-3, warmup_steps=10,
                                       weight_decay=0.01, clip_norm=None, b1=0.9, b2=0.999,
                                       eps=1e-6))
    t.update(kw)
    return t


@pytest.fixture(scope="module")
def real_params():
    from tests.training.conftest import load_config
    config = load_config()
    config.model.vocab_size = 120

    @jax.jit  # one compile instead of hundreds of eager init ops
    def init():
        with nnx.use_eager_sharding(False):
            model = models.build_model(config, nnx.Rngs(0))
        return nnx.to_pure_dict(nnx.state(model, nnx.Param))

    return init()


def test_exclusion_mask_on_real_model(real_params):
    mask = optimizer.decay_mask(real_params)
    flat = {optimizer.path_str(p): m for p, m in jax.tree_util.tree_flatten_with_path(mask)[0]}
    excluded = {k for k, m in flat.items() if not m}
    included = {k for k, m in flat.items() if m}
    # every LayerNorm scale and bias, and every bias, is excluded ...
    assert any(k.endswith("norm/scale") for k in excluded)
    for k in flat:
        if k.endswith("/bias") or (k.endswith("/scale") and "norm" in k.split("/")[-2]):
            assert k in excluded, k
    # ... and every matrix / table gets decay and a trust ratio
    for p, leaf in jax.tree_util.tree_flatten_with_path(real_params)[0]:
        if leaf.ndim >= 2 and not optimizer.path_str(p).endswith("bias"):
            assert optimizer.path_str(p) in included, optimizer.path_str(p)
    assert any("kernel" in k for k in included) and any("embedding" in k for k in included)


def test_update_per_leaf_matches_bert_lamb(real_params):
    """One step from scratch: excluded leaves get the plain Adam step (ratio 1, no decay),
    the others (adam + wd * p) * ||p|| / ||adam + wd * p||."""
    train = _train(warmup_steps=0)
    tx, schedule = optimizer.make_optimizer(train, real_params)
    rng = np.random.default_rng(1)
    grads = jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32) * 1e-3, real_params)
    updates = jax.jit(lambda g, p: tx.update(g, tx.init(p), p)[0])(grads, real_params)
    # Adam's first step, bias-corrected: m_hat = g, v_hat = g^2 -> g / (|g| + eps)
    adam = jax.tree.map(lambda g: np.asarray(g) / (np.abs(np.asarray(g)) + 1e-6), grads)
    lr = float(schedule(0))
    mask = optimizer.decay_mask(real_params)
    checked = {True: 0, False: 0}
    for u, a, p, m in zip(jax.device_get(jax.tree.leaves(updates)), jax.tree.leaves(adam),
                          jax.device_get(jax.tree.leaves(real_params)), jax.tree.leaves(mask)):
        if m:
            d = a + 0.01 * p
            pn, dn = np.linalg.norm(p), np.linalg.norm(d)
            ratio = pn / dn if pn > 0 and dn > 0 else 1.0
            expected = -lr * ratio * d
        else:
            expected = -lr * a
        np.testing.assert_allclose(u, expected, rtol=2e-5, atol=1e-10)
        checked[bool(m)] += 1
    assert checked[True] > 5 and checked[False] > 5


def test_trust_ratio_per_layer_slice_for_stacked_leaves():
    """A leaf with a 'layers' axis gets one ratio per layer slice, not one for the stack."""
    p = jnp.stack([jnp.full((3, 4), 1.0), jnp.full((3, 4), 10.0)])  # [layers=2, 3, 4]
    u = jnp.ones_like(p)
    params, updates = {"w": p}, {"w": u}
    specs = {"w": jax.sharding.PartitionSpec("layers", "embed", "mlp")}
    axes = optimizer.layer_axes_from_specs(specs)
    assert axes == {"w": 0}
    tx = optimizer.scale_by_layerwise_trust_ratio({"w": True}, axes)
    out, _ = tx.update(updates, tx.init(params), params)
    # ||p_l|| / ||u_l|| = 1 and 10 per slice; a whole-leaf ratio would be ~7.1 for both
    np.testing.assert_allclose(out["w"][0], 1.0, rtol=1e-6)
    np.testing.assert_allclose(out["w"][1], 10.0, rtol=1e-6)
    whole = optimizer.scale_by_layerwise_trust_ratio({"w": True}, {"w": -1})
    out2, _ = whole.update(updates, whole.init(params), params)
    np.testing.assert_allclose(out2["w"], np.sqrt(101 / 2), rtol=1e-6)


def test_zero_norm_gives_ratio_one():
    tx = optimizer.scale_by_layerwise_trust_ratio({"b": True}, {"b": -1})
    out, _ = tx.update({"b": jnp.ones(3)}, tx.init(None), {"b": jnp.zeros(3)})
    np.testing.assert_allclose(out["b"], 1.0)


def test_schedule_values():
    s = optimizer.warmup_linear_decay(_train(steps=100, warmup_steps=10, learning_rate=1e-3))
    np.testing.assert_allclose(
        [float(s(t)) for t in (0, 5, 10, 55, 100, 150)], [0.0, 5e-4, 1e-3, 5e-4, 0.0, 0.0],
        atol=1e-9)
    s0 = optimizer.warmup_linear_decay(_train(steps=4, warmup_steps=0, learning_rate=2.0))
    np.testing.assert_allclose([float(s0(t)) for t in range(5)], [2.0, 1.5, 1.0, 0.5, 0.0])


def test_constant_schedule_keeps_the_peak_after_warmup():
    s = optimizer.warmup_linear_decay(_train(steps=100, warmup_steps=10, learning_rate=1e-3,
                                             schedule="constant"))
    np.testing.assert_allclose([float(s(t)) for t in (0, 5, 10, 55, 100, 150)],
                               [0.0, 5e-4, 1e-3, 1e-3, 1e-3, 1e-3], atol=1e-9)
    with pytest.raises(ConfigError, match="train.schedule"):
        optimizer.warmup_linear_decay(_train(schedule="cosine"))


def test_bad_fields_raise_config_error():
    with pytest.raises(ConfigError, match="train.warmup_steps"):
        optimizer.warmup_linear_decay(_train(steps=10, warmup_steps=10))
    with pytest.raises(ConfigError, match="train.no_decay"):
        optimizer.make_optimizer(_train(no_decay=["(unclosed"]), {"w": jnp.ones(2)})


def test_rope2d_mixed_frequencies_are_excluded():
    """Heo et al.'s RoPE-Mixed excludes its learned frequencies from weight decay: every
    layer's rope2d `freqs` is out of the mask, the attention kernels beside it stay in."""
    from tests.models.support import model_config

    config = model_config({"name": "rope2d", "mode": "mixed"})
    with nnx.use_eager_sharding(False):
        abstract = nnx.eval_shape(lambda: models.build_model(config, nnx.Rngs(0)))
    params = nnx.to_pure_dict(nnx.state(abstract, nnx.Param))
    flat = {optimizer.path_str(p): m for p, m in
            jax.tree_util.tree_flatten_with_path(optimizer.decay_mask(params))[0]}
    freqs = sorted(k for k in flat if k.endswith("/freqs"))
    assert freqs == [f"encoder/layers/{i}/hook/tree/freqs"
                     for i in range(config.model.num_layers)], freqs
    assert not any(flat[k] for k in freqs)
    assert flat["encoder/layers/0/attention/query/kernel"]
    # one step: the frequencies move by the plain Adam step, no decay, no trust ratio
    train = _train(warmup_steps=0, weight_decay=0.5)
    p = {"freqs": jnp.full((2, 3), 2.0)}
    tx, schedule = optimizer.make_optimizer(train, p)
    g = {"freqs": jnp.asarray([[1.0, -2.0, 0.5], [0.1, 3.0, -1.0]])}
    updates, _ = tx.update(g, tx.init(p), p)
    adam = -float(schedule(0)) * np.sign(np.asarray(g["freqs"]))  # Adam's first step: sign
    np.testing.assert_allclose(updates["freqs"], adam, rtol=1e-4)


def _scheme_trees():
    """(name, init_layer tree) of every registered scheme that has parameters (bound causal
    where a scheme is causal-only; schemes that need more than positions are left out)."""
    from posjax import positions
    from posjax.positions.base import Dims
    out = []
    for name in positions.names():
        for causal in (False, True):
            try:
                scheme = positions.make(name).bind(Dims(num_heads=2, head_dim=16, hidden=32,
                                                        max_length=64, causal=causal))
                tree = scheme.init_layer(jax.random.PRNGKey(0))
            except ConfigError:
                continue
            if tree:
                out.append((name, tree))
            break
    return out


def test_every_zero_initialised_scheme_leaf_is_kept_from_the_trust_ratio():
    """A trust ratio holds a leaf that starts at zero near zero (ratio 1 once, then about the
    learning rate): each scheme names such leaves in Scheme.no_decay, and the optimizer's mask
    leaves them out wherever the model keeps the scheme's tree."""
    from posjax.positions import scheme_class
    trees = _scheme_trees()
    assert {"string", "cope", "pope", "ssmax", "path", "tupe"} <= {n for n, _ in trees}
    for name, tree in trees:
        zero = {optimizer.path_str(p) for p, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
                if not np.any(np.asarray(leaf))}
        assert zero <= set(scheme_class(name).no_decay), name
        patterns = optimizer.DEFAULT_NO_DECAY + optimizer.position_patterns({"name": name})
        for where in ({"encoder": {"layers": {"0": {"hook": {"tree": tree}}}}},
                      {"encoder": {"position": {"tree": tree}}}):
            mask = optimizer.decay_mask(where, patterns)
            for p, m in jax.tree_util.tree_flatten_with_path(mask)[0]:
                leaf = optimizer.path_str(p).rsplit("/", 1)[-1]
                assert m == (leaf not in scheme_class(name).no_decay
                             and leaf not in ("freqs",)), (name, leaf)


# Scheme leaves whose reference implementations name them biases under other names: XL's u
# and v are r_w_bias and r_r_bias (kimiyoung/transformer-xl), which BERT's "bias" rule drops.
RENAMED_BIASES = {"xl": {"u", "v"}}


def test_every_scheme_bias_takes_berts_excluded_treatment():
    """BERT's LAMB excludes every bias from decay and the trust ratio. A scheme leaf named as a
    bias (b, b1, ..., *bias*) or renamed from one is excluded: a trust ratio on FIRE's or
    DAPE's MLP biases or FoX's gate bias rescales their steps by ||b|| / ||update||."""
    import re
    trees = _scheme_trees()
    assert {"fire", "dape", "fox", "xl", "path"} <= {n for n, _ in trees}
    seen = set()
    for name, tree in trees:
        patterns = optimizer.DEFAULT_NO_DECAY + optimizer.position_patterns({"name": name})
        mask = optimizer.decay_mask({"encoder": {"layers": {"0": {"hook": {"tree": tree}}}}},
                                    patterns)
        for p, decayed in jax.tree_util.tree_flatten_with_path(mask)[0]:
            leaf = optimizer.path_str(p).rsplit("/", 1)[-1]
            if re.fullmatch(r"b\d*|.*bias.*", leaf) or leaf in RENAMED_BIASES.get(name, ()):
                seen.add((name, leaf))
                assert not decayed, (name, leaf)
    assert {("fire", "b1"), ("dape", "b2"), ("fox", "b"), ("xl", "u")} <= seen


def test_a_zero_leaf_moves_by_adam_steps_outside_the_trust_ratio_and_stays_put_inside():
    """20 steps of one constant gradient from w = 0, learning rate 1e-2: out of the mask each
    step is Adam's (about lr), in it the trust ratio cuts every step after the first to
    about lr times the one before."""
    params = {"kept": jnp.zeros(4), "ratio": jnp.zeros(4)}
    tx, _ = optimizer.make_optimizer(_train(warmup_steps=0, steps=1000, learning_rate=1e-2,
                                            weight_decay=0.0, schedule="constant",
                                            no_decay=[r"kept"]), params)
    state, grads = tx.init(params), {"kept": jnp.ones(4), "ratio": jnp.ones(4)}
    for _ in range(20):
        updates, state = tx.update(grads, state, params)
        params = jax.tree.map(lambda p, u: p + u, params, updates)
    assert np.allclose(np.abs(params["kept"]), 20 * 1e-2, rtol=1e-3)
    assert np.abs(params["ratio"]).max() < 2 * 1e-2


def test_the_training_state_keeps_the_schemes_leaves_from_the_trust_ratio():
    """make_optimizer(position=...) as the trainer calls it: the model's own parameter paths."""
    from tests.training.conftest import load_config
    config = load_config()
    config.model.vocab_size = 120
    config.position = ml_collections.ConfigDict({"name": "cope"})

    @jax.jit
    def init():
        with nnx.use_eager_sharding(False):
            model = models.build_model(config, nnx.Rngs(0))
        return nnx.to_pure_dict(nnx.state(model, nnx.Param))

    params = init()
    patterns = optimizer.DEFAULT_NO_DECAY + optimizer.position_patterns(config.position)
    flat = {optimizer.path_str(p): m for p, m in jax.tree_util.tree_flatten_with_path(
        optimizer.decay_mask(params, patterns))[0]}
    emb = [k for k in flat if k.endswith("/emb")]
    assert emb and not any(flat[k] for k in emb)
    assert any(flat[k] for k in flat if k.endswith("kernel"))
