"""The tile math that attention's XLA paths (posjax.attention) and the Pallas kernels
(posjax.kernels) share, below both so that attention can call the kernels directly:

  tiles.py   mask value, masks, key counting, log-n factor, rotations, value combining
  banded.py  a local (sliding-window) layer's band of key blocks and its exact check
  mixed.py   mixed-precision products (float32 accumulation, forward and backward)

Imports nothing from posjax above `positions/`.
"""
