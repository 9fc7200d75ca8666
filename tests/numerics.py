"""Comparisons of two DIFFERENT programs' floating-point results.

Two programs that compute the same sum in another order (a stacked matmul against three, XLA's
dot against numpy's tensordot) agree only up to rounding, and how much depends on the CPU's
vector width (AVX2 and AVX-512 block the reductions differently). An element near zero can
then differ by far more than a fixed rtol allows, so the error is judged against the norm of
the whole result: ||actual - desired|| <= rtol * ||desired||. Bitwise checks stay for one program
run twice (resume, NaN policies), where they are guaranteed.
"""

from __future__ import annotations

import numpy as np

# A float32 sum of n terms rounds to within about n * 2^-24 of its value, relative to the sum of
# magnitudes; 1e-6 covers the tests' short reductions with room. bfloat16 keeps 8 bits.
FLOAT32_RTOL = 1e-6
BFLOAT16_RTOL = 8e-3


def assert_close_in_norm(actual, desired, rtol: float = FLOAT32_RTOL) -> None:
    actual = np.asarray(actual, np.float64)
    desired = np.asarray(desired, np.float64)
    assert actual.shape == desired.shape, (actual.shape, desired.shape)
    error = np.linalg.norm(actual - desired)
    scale = np.linalg.norm(desired)
    assert error <= rtol * scale, f"||actual - desired|| = {error:.3g} > {rtol:g} * {scale:.3g}"
