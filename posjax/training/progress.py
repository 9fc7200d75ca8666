"""Progress bar, per-step log lines, throughput (tokens/s, TFLOP/s), the time left, and
TensorBoard events."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from typing import Optional

from tqdm import tqdm

from posjax import schema, storage


def model_dims_from_config(config) -> dict:
    m = schema.view(config).model
    hidden = int(m.hidden)
    heads = int(m.num_heads)
    head_dim = int(m.head_dim or hidden // heads)
    emb = int(m.embedding_dim or hidden)
    return dict(hidden=hidden, layers=int(m.num_layers), heads=heads, head_dim=head_dim,
                mlp=int(m.mlp_dim), embedding_dim=emb, vocab=int(m.vocab_size or 0),
                causal=bool(m.causal),
                gated=m.mlp == "glu" or "glu" in str(m.activation).lower())


def training_flops_per_step(config, batch_size: int, seq_len: int,
                            predictions_per_row: Optional[int] = None) -> float:
    """Model FLOPs of one training step (forward + backward), the MaxText way.

    Source: MaxText `calculate_tflops_training_per_device` (maxtext_utils.py) and Kaplan et
    al. 2020 sec. 2.1: a matmul with N weights costs 2N FLOPs per token forward and 4N
    backward, so 6N per token; attention's two L x L matmuls (QK^T and PV) cost
    2 * 2 * L * (heads * head_dim) per token per layer forward, x3 for training.

      T = batch_size * seq_len tokens
      N = layers * (4 * hidden * heads * head_dim           # q, k, v, o projections
                    + (2 or 3) * hidden * mlp)              # MLP (3 when gated, *GLU)
          + embedding_dim * hidden (ALBERT factorization, if embedding_dim < hidden)
      Tp = batch_size * predictions_per_row  (places the LM head runs on; default all T)
      FLOPs = 6 * N * T
            + 12 * layers * seq_len * heads * head_dim * T * (1/2 if causal)
            + 6 * Tp * (hidden * embedding_dim                # MLM head transform
                        + embedding_dim * vocab)             # output logits over the vocab

    ALBERT layer sharing does not reduce FLOPs (shared weights are applied `layers` times),
    which is why N is computed from the config rather than counted from the param tree.
    Position-scheme extras (NEZHA's relative terms, biases) are not counted: the number is
    comparable across schemes, as MaxText's MFU is.
    """
    d = model_dims_from_config(config)
    t = float(batch_size * seq_len)
    attn_width = d["heads"] * d["head_dim"]
    per_layer = 4 * d["hidden"] * attn_width + (3 if d["gated"] else 2) * d["hidden"] * d["mlp"]
    n = d["layers"] * per_layer
    if d["embedding_dim"] != d["hidden"]:
        n += d["embedding_dim"] * d["hidden"]
    attention = 12 * d["layers"] * seq_len * attn_width * t * (0.5 if d["causal"] else 1.0)
    tp = float(batch_size * (seq_len if predictions_per_row is None else predictions_per_row))
    head = 6 * tp * (d["hidden"] * d["embedding_dim"] + d["embedding_dim"] * d["vocab"])
    return 6 * n * t + attention + head


def duration(seconds: float) -> str:
    """'45s', '12m05s', '3h07m': a time left or taken, as a log line prints it."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _summary_writer():
    """tensorboardX's SummaryWriter, imported without torch where torch is installed but not
    yet imported: tensorboardX imports torch (seconds) only to accept torch tensors, and posjax
    logs Python floats."""
    if "torch" in sys.modules:
        from tensorboardX import SummaryWriter

        return SummaryWriter
    sys.modules["torch"] = None  # `import torch` raises ImportError; tensorboardX expects that
    try:
        from tensorboardX import SummaryWriter
    finally:
        del sys.modules["torch"]
    return SummaryWriter


class _MirroredWriter:
    """A SummaryWriter for a workdir that is not a local path (gs://...): tensorboardX writes
    to such paths only with extra packages (google-cloud-storage for gs://), so events are
    written to a local temporary directory and each flush copies the event files into
    <workdir>/tb through posjax.storage (whole files: they stay small, scalars only)."""

    def __init__(self, target: str):
        self.target = target
        self.local = tempfile.mkdtemp(prefix="posjax_tb_")
        self.writer = _summary_writer()(self.local)

    def add_scalar(self, tag, value, step):
        self.writer.add_scalar(tag, value, step)

    def _mirror(self):
        for name in os.listdir(self.local):
            with open(os.path.join(self.local, name), "rb") as f:
                storage.write_bytes(storage.join(self.target, name), f.read())

    def flush(self):
        self.writer.flush()
        self._mirror()

    def close(self):
        self.writer.close()
        self._mirror()
        shutil.rmtree(self.local, ignore_errors=True)


def summary_writer(workdir: str):
    """The TensorBoard writer of <workdir>/tb (a local path or any posjax.storage URI)."""
    tb = storage.join(workdir, "tb")
    if storage.is_local(tb):
        return _summary_writer()(tb)
    return _MirroredWriter(tb)


class Logger:
    """One object for the bar, the text lines and the TensorBoard writer.

    Lines go through tqdm.write so the bar stays at the bottom; `quiet` drops the bar (tests,
    non-tty logs) but keeps the lines.
    """

    def __init__(self, workdir: str, total_steps: int, start_step: int, *, flops_per_step: float,
                 tokens_per_step: int, num_devices: int, enable_bar: Optional[bool] = None):
        self.writer = summary_writer(workdir)
        if enable_bar is None:
            enable_bar = sys.stderr.isatty()
        self.bar = tqdm(total=total_steps, initial=start_step, disable=not enable_bar,
                        dynamic_ncols=True, desc="train")
        self.total_steps = int(total_steps)
        self.flops_per_step = flops_per_step
        self.tokens_per_step = tokens_per_step
        self.num_devices = num_devices
        self._window_start = time.perf_counter()
        self._window_steps = 0

    def write(self, line: str) -> None:
        tqdm.write(line, file=sys.stdout)
        sys.stdout.flush()

    def step_done(self) -> None:
        self.bar.update(1)
        self._window_steps += 1

    def restart_window(self) -> None:
        """Call after a compile or an eval so they do not count against throughput."""
        self._window_start = time.perf_counter()
        self._window_steps = 0

    def log_train(self, step: int, values: dict) -> dict:
        elapsed = max(time.perf_counter() - self._window_start, 1e-9)
        steps = max(self._window_steps, 1)
        values = dict(values)
        values["tokens_per_s"] = self.tokens_per_step * steps / elapsed
        values["tflops_per_device"] = self.flops_per_step * steps / elapsed / self.num_devices / 1e12
        values["step_time_s"] = elapsed / steps
        parts = [f"step {step}", f"loss {values['loss']:.4f}"]
        if "mlm_accuracy" in values:
            parts.append(f"mlm_acc {values['mlm_accuracy']:.4f}")
        if "sop_accuracy" in values:
            parts.append(f"sop_acc {values['sop_accuracy']:.3f}")
        parts += [f"lr {values['learning_rate']:.3e}", f"grad_norm {values.get('grad_norm', 0.0):.3f}",
                  f"tokens/s {values['tokens_per_s']:.0f}",
                  f"TFLOP/s/device {values['tflops_per_device']:.4f}"]
        if step < self.total_steps:  # at this window's pace (compiles and evals excluded)
            parts.append(f"ETA {duration(values['step_time_s'] * (self.total_steps - step))}")
        if values.get("skipped_total"):
            parts.append(f"skipped {int(values['skipped_total'])}")
        self.write(" | ".join(parts))
        self.bar.set_postfix(loss=f"{values['loss']:.3f}")
        for k, v in values.items():
            self.writer.add_scalar(f"train/{k}", float(v), step)
        self.writer.flush()
        self.restart_window()
        return values

    def log_eval(self, step: int, values: dict) -> None:
        parts = [f"eval step {step}"] + [f"{k} {v:.4f}" for k, v in sorted(values.items())]
        self.write(" | ".join(parts))
        for k, v in values.items():
            self.writer.add_scalar(f"eval/{k}", float(v), step)
        self.writer.flush()

    def close(self) -> None:
        self.bar.close()
        self.writer.close()
