"""posjax/training/dot_profile.py (the analysis of bench/dot_profile.py) reads the dots of a
compiled program and their FLOPs correctly, and its bounds follow from the times it is given."""

import collections

import jax
import jax.numpy as jnp

from posjax.training.dot_profile import Dot, report, thunk_dots


def _compiled_text():
    def f(a, b, q, k):
        return a @ b, jnp.einsum("bqd,bkd->bqk", q, k), jnp.tanh(a)

    args = [jnp.zeros(s, jnp.float32) for s in ((64, 32), (32, 48), (2, 16, 8), (2, 24, 8))]
    return jax.jit(f).lower(*args).compile().as_text()


def test_every_dot_of_a_compiled_program_with_its_flops_and_batching():
    dots, names = thunk_dots(_compiled_text())
    found = sorted((d.shape, d.k, d.flops, d.batched) for _, ds in dots.values() for d in ds)
    assert found == [((2, 16, 24), 8, 2.0 * 2 * 16 * 24 * 8, True),
                     ((64, 48), 32, 2.0 * 64 * 48 * 32, False)]
    assert set(dots) <= names  # each is an instruction the trace can name


def test_bounds_follow_from_the_times():
    dots = {"u": ("ynn", [Dot((1000, 1000), 1000, False)]),  # 2 GFLOP in 20 ms: 100 GFLOP/s
            "b": ("ynn", [Dot((4, 500, 500), 1000, True)])}  # 2 GFLOP in 80 ms: 25 GFLOP/s
    times = collections.Counter(u=20.0, b=80.0, other=50.0)
    text = "\n".join(report(times, dots, {"u", "b"}, peak=200.0, wall_ms=120.0))
    assert "op time 100.0 ms/step" in text  # "other" is no instruction of the program
    assert "all dots: 100.0 ms, 4.00 GFLOP, 40.0 GFLOP/s; step wall 120.0 ms" in text
    # the batched dot at the unbatched rate: 80 -> 20 ms
    assert "at the unbatched dots' 100.0 GFLOP/s would save 60.0 ms" in text
    # both at 200 GFLOP/s: 100 -> 20 ms
    assert "(200.0 GFLOP/s) would save 80.0 ms" in text
    lines = text.splitlines()
    assert lines.index(next(l for l in lines if "* ynn [4, 500, 500] K=1000" in l)) < \
        lines.index(next(l for l in lines if "  ynn [1000, 1000] K=1000" in l))  # slowest first


def test_a_dot_inside_nested_loops_counts_every_trip():
    """The trace sums an in-loop instruction's op time over its runs; its FLOPs must be
    summed the same way (a scan of 3 inside a scan of 4 runs the inner dot 12 times)."""
    def f(a, q, k):
        def outer(c, x):
            def inner(c2, y):
                return c2 + jnp.einsum("qd,kd->qk", y, k).sum(), None
            c2, _ = jax.lax.scan(inner, 0.0, x)
            return c + c2 + (x[0] @ a).sum(), None
        return jax.lax.scan(outer, 0.0, q)[0]

    args = [jnp.zeros(s, jnp.float32) for s in ((8, 8), (4, 3, 16, 8), (24, 8))]
    dots, _ = thunk_dots(jax.jit(f).lower(*args).compile().as_text())
    found = sorted((d.shape, d.runs, d.flops) for _, ds in dots.values() for d in ds)
    assert found == [((16, 8), 4, 4 * 2.0 * 16 * 8 * 8), ((16, 24), 12, 12 * 2.0 * 16 * 24 * 8)]
    text = "\n".join(report(collections.Counter({n: 1.0 for n in dots}), dots, set(dots),
                            peak=1.0, wall_ms=1.0))
    assert "[16, 24] K=8 (x12 in loops)" in text


def test_an_instruction_of_several_outputs_is_named():
    """The trace names a multi-output custom call (the attention kernel's backward) by its
    instruction, whose shape is a tuple: its op time counts like any other."""
    hlo = ("ENTRY %main (p: f32[4]) -> f32[4] {\n"
           "  %p = f32[4]{0} parameter(0)\n"
           "  %ffi_call.93 = (f32[4]{0}, f32[4]{0}) custom-call(%p), custom_call_target=\"k\"\n"
           "  ROOT %get-tuple-element.1 = f32[4]{0} get-tuple-element(%ffi_call.93), index=0\n"
           "}")
    _, names = thunk_dots(hlo)
    assert {"p", "ffi_call.93", "get-tuple-element.1"} <= names
    text = "\n".join(report(collections.Counter({"ffi_call.93": 7.0}), {}, names, peak=1.0,
                            wall_ms=1.0))
    assert "op time 7.0 ms/step" in text


def test_a_dot_traced_faster_than_the_machine_is_left_out_as_untimed():
    """XLA:CPU launches its own dots asynchronously: the trace then holds a launch of ~1 ms for
    a product of 3.4 GFLOP (2,300 GFLOP/s on a 250 GFLOP/s machine). Its rate is no rate."""
    dots = {"ynn.1": ("ynn", [Dot((1000, 1000), 1000, False)]),  # 2 GFLOP in 20 ms
            "dot.19": ("xla", [Dot((64, 512), 10240, False)])}  # 0.67 GFLOP "in" 0.3 ms
    times = collections.Counter({"ynn.1": 20.0, "dot.19": 0.3})
    text = "\n".join(report(times, dots, set(dots), peak=250.0, wall_ms=30.0))
    assert "all dots: 20.0 ms, 2.00 GFLOP, 100.0 GFLOP/s" in text
    assert "not timed (1: traced faster than 2x the square-matmul rate" in text
    assert "[64, 512] K=10240" in text and "xla [64, 512]" not in text
