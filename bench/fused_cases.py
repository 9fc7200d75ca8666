"""One representative config per scheme the kernels fuse (posjax.kernels.supports), shared by
the deviceless compile benchmarks (tpu_compile.py, gpu_compile.py, gpu_memory.py)."""

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
}
