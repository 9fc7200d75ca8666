"""FUSED_CASES: one representative position config per scheme (and variant) that the kernels
fuse (posjax.kernels.supports). tests/kernels and the bench compile scripts iterate over this
one dict, so a newly fused scheme is tested and benchmarked by adding it here."""

from posjax.positions import Dims, make, scheme_class

FUSED_CASES = {
    "none": {"name": "none"},
    "rope": {"name": "rope"},
    "xpos": {"name": "xpos"},
    "alibi": {"name": "alibi"},
    "kerple_log": {"name": "kerple"},
    "kerple_power": {"name": "kerple", "variant": "power"},
    "t5": {"name": "t5"},
    "shaw": {"name": "shaw"},
    "nezha": {"name": "nezha"},
    "deberta": {"name": "deberta"},
    "fox": {"name": "fox"},
}


def bind_case(config, num_heads: int, head_dim: int, max_length: int):
    """The scheme of a case config, bound to dims of the given shape (causal where the scheme
    requires it). Attention must then run with causal=True for those (`case_causal`)."""
    scheme = make(config)
    dims = Dims(num_heads=num_heads, head_dim=head_dim, hidden=num_heads * head_dim,
                max_length=max_length, causal=case_causal(config))
    return scheme.bind(dims)


def case_causal(config) -> bool:
    """Whether the case's scheme needs a causal model (xPos; T5 with one-sided buckets)."""
    return bool(scheme_class(config["name"]).causal_only) or config.get("bidirectional") is False
