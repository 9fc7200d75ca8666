"""posjax.training: LAMB, mesh + logical sharding, orbax checkpoints, logging and the loop.

Entry point: `train_and_evaluate(config, workdir)` (used by train.py). Submodules:
  optimizer    LAMB with BERT's exclusions, warmup + linear decay
  sharding     mesh from config.mesh, logical axis rules -> NamedShardings
  state        train state pytrees, jitted train / eval steps
  losses       MLM / SOP / causal LM losses (float32)
  checkpoints  orbax CheckpointManager (state + data iterator state)
  workdir      fresh / resume / refuse rules, config.json
  progress     progress bar, log lines, tokens/s and TFLOP/s, TensorBoard
  signals      SIGTERM / SIGINT handling
"""


def train_and_evaluate(config, workdir: str, **kwargs):
    """See posjax.training.loop.train_and_evaluate, imported here, not at the top: importing
    posjax.training.signals (train.py, before JAX starts) must not import the whole loop."""
    from posjax.training.loop import train_and_evaluate as _run

    return _run(config, workdir, **kwargs)


__all__ = ["train_and_evaluate"]
