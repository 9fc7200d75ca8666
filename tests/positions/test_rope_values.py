"""RoPE on values (`rope` on_values=True): attention against a direct O(L^2) definition written
with complex numbers (values and gradients, reference / chunked / kernel), and its defining
property: shifting every position leaves the output unchanged (the value path is relative)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import posjax.kernels  # noqa: F401  registers implementation='kernel' with attend
from posjax import positions
from posjax.attention import attend
from posjax.errors import ConfigError
from posjax.positions.base import Dims

B, L, H, D = 2, 7, 2, 8
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64)
TOL = dict(rtol=2e-5, atol=2e-5)


def _inputs(seed=0):
    rng = np.random.RandomState(seed)
    q, k, v, ct = (jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))
    pos = jnp.asarray(np.sort(rng.choice(40, (B, L), replace=False), axis=1), jnp.int32)
    return q, k, v, ct, pos


def direct(q, k, v, pos, base=10000.0):
    """out_i = sum_j softmax_j(Re(q~_i . conj(k~_j)) / sqrt(D)) R((pos_j - pos_i) theta) v_j.

    Interleaved pairs (x0, x1) as complex x0 + i x1; rotating by angle a multiplies by
    exp(i a). Every (i, j) pair is built explicitly: O(L^2) on purpose."""
    theta = base ** (-np.arange(0, D, 2) / D)  # [D/2]
    as_c = lambda x: x[..., 0::2] + 1j * x[..., 1::2]  # noqa: E731
    ang = pos[..., None].astype(jnp.float32) * theta  # [B, L, D/2]
    qc = as_c(q) * jnp.exp(1j * ang)[:, :, None]
    kc = as_c(k) * jnp.exp(1j * ang)[:, :, None]
    logits = jnp.real(jnp.einsum("bihd,bjhd->bhij", qc, jnp.conj(kc))) / np.sqrt(D)
    p = jax.nn.softmax(logits, axis=-1)
    rel = ang[:, None, :, :] - ang[:, :, None, :]  # [B, i, j, D/2]: (pos_j - pos_i) theta
    vrot = as_c(v)[:, None] * jnp.exp(1j * rel)[:, :, :, None]  # [B, i, j, H, D/2]
    oc = jnp.einsum("bhij,bijhd->bihd", p, vrot)
    return jnp.stack([jnp.real(oc), jnp.imag(oc)], axis=-1).reshape(B, L, H, D)


def _scheme(**kw):
    return positions.make("rope", on_values=True, **kw).bind(DIMS)


def _loss(fn, ct):
    return lambda q, k, v: (fn(q, k, v) * ct).sum()


def test_matches_direct_definition_values_and_grads():
    # reference and chunked (blocks of 4: several query and key blocks; its gradients, which
    # go through every block) against the direct definition in one compile; then the kernel
    # path (interpret mode on CPU), forward: the rotations around it are plain JAX, so their
    # gradients are JAX's own.
    q, k, v, ct, pos = _inputs()
    scheme = _scheme()

    def ours(implementation):
        return lambda q, k, v: attend(q, k, v, scheme=scheme, q_pos=pos, k_pos=pos,
                                      implementation=implementation, block_q=4, block_k=4)

    grads = lambda f: jax.grad(_loss(f, ct), argnums=(0, 1, 2))  # noqa: E731
    mine = lambda q, k, v: direct(q, k, v, pos)  # noqa: E731
    run = jax.jit(lambda *a: (ours("reference")(*a), ours("chunked")(*a), mine(*a),
                              grads(ours("chunked"))(*a), grads(mine)(*a)))
    out, out_c, out_d, g_c, g_d = run(q, k, v)
    for o in (out, out_c):
        np.testing.assert_allclose(o, out_d, **TOL)
    for a, b in zip(g_c, g_d):
        np.testing.assert_allclose(a, b, **TOL)
    half = _scheme(interleaved=False, rotary_dim=4)
    paths = jax.jit(lambda q, k, v: [attend(q, k, v, scheme=half, q_pos=pos, k_pos=pos,
                                            implementation=impl, block_q=16, block_k=16)
                                     for impl in ("kernel", "reference")])
    np.testing.assert_allclose(*paths(q, k, v), **TOL)


def test_shifting_all_positions_leaves_the_output_unchanged():
    q, k, v, _, pos = _inputs(seed=2)
    with_values, plain = _scheme(), positions.make("rope").bind(DIMS)
    run = jax.jit(lambda qp, kp: [attend(q, k, v, scheme=s, q_pos=qp, k_pos=kp)
                                  for s in (with_values, plain)])
    (out, out_plain), (shifted, _), (shifted_q, _) = run(pos, pos), run(pos + 13, pos + 13), \
        run(pos + 3, pos)
    np.testing.assert_allclose(out, shifted, **TOL)
    # Not vacuous: the output is not plain RoPE's, and a query-only shift changes it.
    assert not np.allclose(out, out_plain, atol=1e-3)
    assert not np.allclose(out, shifted_q, atol=1e-3)
    assert "rotate_values" in with_values.hooks and "rotate_values" not in plain.hooks


def test_bad_values_field():
    with pytest.raises(ConfigError, match="position.on_values"):
        positions.make("rope", on_values="yes")


def test_eval_methods_keep_or_refuse_the_value_rotation():
    # The RoPE scalings only change frequencies (on_values=True stays); ReRoPE has no value
    # rotation, so evaluating it would be another model: not_applicable.
    from posjax.evaluation import methods
    from posjax.evaluation.run.restore import Run
    from tests.evaluation.fixtures import TRAINED, tiny_config

    config = tiny_config("rope", on_values=True)
    config.model.vocab_size = 100
    run = Run("fake", "/nonexistent", 0, config, tokenizer=None)
    cell = methods.make_cell(run, methods.Variant("yarn"), 4 * TRAINED)
    assert cell.config.position.on_values is True and cell.config.position.scaling == "yarn"
    for method in ("rerope", "leaky_rerope"):
        with pytest.raises(methods.NotApplicable, match="on_values=True"):
            methods.make_cell(run, methods.Variant(method), 4 * TRAINED)
