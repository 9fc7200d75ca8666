"""Logical axis metadata on every parameter; constraints are no-ops without a mesh and work
under a (1-device) mesh with the config's rules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import models
from posjax.models.partitioning import constrain
from posjax.mesh_rules import PRESETS

from tests.models.support import make_batch, model_config

LOGICAL = {"batch", "length", "embed", "heads", "kv", "mlp", "vocab", None}


def _params(model):
    """[(path tuple, nnx.Param)] for every parameter."""
    return list(nnx.to_flat_state(nnx.state(model, nnx.Param)))


@pytest.mark.parametrize(
    "position,model",
    [
        ("learned", dict(sop=True)),
        ("t5", dict(share_layers=True, embedding_dim=16)),
        ("deberta", dict(post_ln=False)),
        ("tupe", dict(causal=False)),
        ("rope", dict(causal=True)),
    ],
)
def test_every_param_has_logical_axes(position, model):
    abstract = nnx.eval_shape(
        lambda: models.build_model(model_config(position, **model), nnx.Rngs(0))
    )
    leaves = _params(abstract)
    assert leaves
    for path, var in leaves:
        names = var.get_metadata().get("out_sharding")
        assert names is not None, path
        assert len(names) == len(var.shape), (path, names, var.shape)
        assert set(names) <= LOGICAL, (path, names)
        named = [n for n in names if n is not None]
        assert len(named) == len(set(named)), (path, names)  # no mesh axis asked for twice
        assert var.dtype == jnp.float32, path


def test_model_kernels_name_their_axes():
    abstract = nnx.eval_shape(lambda: models.build_model(model_config("rope"), nnx.Rngs(0)))
    specs = {
        "/".join(map(str, p)): tuple(v.get_metadata()["out_sharding"]) for p, v in _params(abstract)
    }
    assert specs["encoder/layers/0/attention/query/kernel"] == ("embed", "heads", "kv")
    assert specs["encoder/layers/0/attention/out/kernel"] == ("heads", "kv", "embed")
    assert specs["encoder/layers/0/mlp/wi/kernel"] == ("embed", "mlp")
    assert specs["encoder/embeddings/word/embedding"] == ("vocab", "embed")
    assert specs["lm_head/bias"] == ("vocab",)


def test_constrain_is_identity_without_mesh():
    x = jnp.ones((2, 3, 4))
    assert constrain(x, ("batch", "length", "embed")) is x
    with nnx.logical_axis_rules(PRESETS["fsdp_tp"]):  # rules but no mesh: still a no-op
        np.testing.assert_array_equal(constrain(x, ("batch", "length", "embed")), x)


@pytest.mark.slow
def test_forward_under_mesh_and_rules():
    """Build (eager sharding on) and run the jitted forward inside a 1x1x1 mesh."""
    mesh = jax.make_mesh((1, 1, 1), ("data", "fsdp", "tensor"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 3)
    config = model_config("rope")
    batch = make_batch()
    ref = models.build_model(config, nnx.Rngs(0))(batch)["mlm_logits"]
    with jax.set_mesh(mesh), nnx.logical_axis_rules(PRESETS["fsdp_tp"]):
        model = models.build_model(config, nnx.Rngs(0))
        kernel = model.encoder.layers[0].attention.query.kernel[...]
        assert isinstance(kernel.sharding, jax.sharding.NamedSharding)
        out = nnx.jit(lambda m, b: m(b)["mlm_logits"])(model, batch)
        jaxpr = jax.make_jaxpr(lambda x: constrain(x, ("batch", "length", "embed")))(
            jnp.ones((2, 3, 4))
        )
        assert "sharding_constraint" in str(jaxpr)  # the helper is live under a mesh
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_hook_params_are_the_schemes_pytree_and_constants_are_not_params():
    """Hooks get exactly the pytree init_layer made; schemes whose constants follow from the
    bound dims (NEZHA's table, ALiBi's slopes, Sandwich's scales) hold no params at all."""
    model = models.build_model(model_config("shaw"), nnx.Rngs(0))
    hook = model.encoder.layers[0].hook.value()
    assert set(hook) == {"keys", "values"} and hook["keys"].shape == (33, 8)
    for name in ("nezha", "alibi", "sandwich"):
        model = models.build_model(model_config(name), nnx.Rngs(0))
        assert model.scheme.dims == models.model_dims(model_config(name))
        hooks = [path for path, _ in _params(model) if "hook" in "/".join(map(str, path))]
        assert hooks == [], (name, hooks)
