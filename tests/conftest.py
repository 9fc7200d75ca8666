"""Shared test setup: tests run on CPU unless the caller chose a platform."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
