r"""posjax's real jitted train step (LAMB) against Hugging Face transformers' BertForMaskedLM with
torch.optim.AdamW, on identical shapes, as a user choosing between the two would run them.

    python -m bench.peer_throughput                         # CPU: float32 and bf16 pairs
    python -m bench.peer_throughput --dtypes=float32 --rounds=3
    python -m bench.peer_throughput --device=cuda --shape=base   # a GPU session, BERT-base

Each side runs in its own worker process (so neither shares a thread pool with the other) and
the parent alternates them: a round is `--steps` timed steps of posjax, then of torch. The
median step of each side gives tokens/s; the ratio posjax/torch is printed last (also by
process CPU seconds per step, which a loaded machine distorts less; a thread pool that spins
while it waits counts there too). bf16 means
posjax's model.dtype='bfloat16' (bf16 matmuls, float32 accumulation, float32 parameters) and
torch's autocast(bfloat16). MFU divides the model FLOPs of one step
(posjax.training.progress.training_flops_per_step, the MLM head counted at the scored places
for both sides: HF runs it at every place, which is work it throws away) by the measured
matmul peak of this machine in that dtype (the best of jax's and torch's square matmuls).

Host memory: both workers start with glibc's huge-page malloc tunable by default, as train.py
starts posjax (posjax/host_memory.py); torch's allocator faults its pages in the same way and
gains from it too. --huge_pages=posjax gives torch the plain default a torch user runs with,
--huge_pages=none neither side.

Shapes (--shape=small, the default): 4 layers, hidden 256, 4 heads, FFN 1024, vocab 8000,
seq 128, batch 32, learned positions, dropout 0, exactly 19 MLM targets per row.
--shape=base: BERT-base (12 x 768, 12 heads, 3072, vocab 30522, seq 512, 76 targets per row),
batch --batch (default 32). --shape=tiny: a seconds-long smoke run of the machinery.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from bench import alternate
from posjax import host_memory

SHAPES = {
    "small": dict(layers=4, hidden=256, heads=4, mlp=1024, vocab=8000, seq=128, batch=32,
                  targets=19),
    "tiny": dict(layers=1, hidden=32, heads=2, mlp=64, vocab=200, seq=16, batch=2, targets=3),
    # The algorithmic length-generalization benchmark's model (Ruoss et al. 2023): 5 layers x 64,
    # 8 heads of 8, FFN 256, a handful of symbols, 40 inputs + 40 outputs, batch 128.
    # Dropout 0.1 as the benchmark trains (torch: hidden dropout only, as posjax and the
    # reference have no dropout on the attention probabilities).
    "algorithmic": dict(layers=5, hidden=64, heads=8, mlp=256, vocab=16, seq=80, batch=128,
                        targets=40, dropout=0.1),
    "base": dict(layers=12, hidden=768, heads=12, mlp=3072, vocab=30522, seq=512, batch=32,
                 targets=76),
}


def make_batches(shape: dict, count: int, seed: int = 0) -> list[dict]:
    """`count` batches of random ids (>= 5), one example per row, exactly `targets` scored
    places per row: the same numpy arrays feed both sides."""
    rng = np.random.default_rng(seed)
    b, l, v, t = shape["batch"], shape["seq"], shape["vocab"], shape["targets"]
    out = []
    for _ in range(count):
        ids = rng.integers(5, v, size=(b, l), dtype=np.int32)
        weights = np.zeros((b, l), np.float32)
        for row in range(b):
            weights[row, rng.choice(l, t, replace=False)] = 1.0
        out.append(dict(input_ids=ids, weights=weights))
    return out


# -- posjax worker ------------------------------------------------------------------------------


def peer_config(shape: dict, dtype: str):
    """posjax's config of the comparison: BERT's learned positions, dropout 0, `shape`."""
    from posjax.config import defaults

    config = defaults.get_config("")
    m = config.model
    m.num_layers, m.hidden, m.num_heads = shape["layers"], shape["hidden"], shape["heads"]
    m.mlp_dim, m.vocab_size, m.dropout = shape["mlp"], shape["vocab"], shape.get("dropout", 0.0)
    m.max_length = max(512, shape["seq"])
    m.dtype = dtype
    config.data.seq_len, config.data.batch_size = shape["seq"], shape["batch"]
    config.data.vocab_size = shape["vocab"]
    config.position = defaults.position("learned")
    return config


class PosjaxSide:
    def __init__(self, shape: dict, dtype: str, device: str):
        import jax

        from posjax import models
        from posjax.training import sharding, state as state_lib
        from posjax.training.optimizer import make_optimizer

        self.jax = jax
        config = self.config = peer_config(shape, dtype)
        models.validate_model_config(config, require_vocab=True)
        mesh = sharding.make_mesh(config.mesh)
        rules = sharding.logical_rules(config.mesh)
        setup = state_lib.make_setup(config, mesh, rules, models.build_model, make_optimizer)
        self.state = setup.init_fn()
        self.batches = []
        for raw in make_batches(shape, 4):
            b, l = raw["input_ids"].shape
            batch = {
                "input_ids": raw["input_ids"],
                "token_type_ids": np.zeros((b, l), np.int32),
                "positions": np.broadcast_to(np.arange(l, dtype=np.int32), (b, l)).copy(),
                "segment_ids": np.ones((b, l), np.int32),
                "mlm_targets": np.where(raw["weights"] > 0, raw["input_ids"], 0).astype(np.int32),
                "mlm_weights": raw["weights"],
            }
            self.batches.append(batch)
        self.batch_sh = state_lib.batch_shardings(self.batches[0], mesh)
        # Every row is one example, unpadded: attention needs no mask (the pipeline's promise).
        self.step = state_lib.make_train_step(setup, config, self.batch_sh, dense_rows=True)
        self.batches = [jax.device_put(b, self.batch_sh) for b in self.batches]
        self.n = 0

    def run(self, steps: int) -> list[float]:
        def one():
            batch = self.batches[self.n % len(self.batches)]
            self.n += 1
            self.state, metrics = self.step(self.state, batch)
            self.loss = self.jax.block_until_ready(metrics["loss"])

        times = alternate.timed_calls(one, steps)
        self.loss = float(self.loss)
        return times

    def flops(self, shape: dict) -> float:
        from posjax.training import progress

        return progress.training_flops_per_step(self.config, shape["batch"], shape["seq"],
                                                shape["targets"])

    def matmul_peak(self, dtype: str, n: int) -> float:
        return jax_matmul_peak(dtype, n)


def jax_matmul_peak(dtype: str, n: int) -> float:
    """FLOP/s of jax's best of 5 square [n, n] products in `dtype` (float32 accumulation)."""
    import jax
    import jax.numpy as jnp

    dt = jnp.bfloat16 if dtype == "bfloat16" else jnp.float32
    a = jnp.ones((n, n), dt)
    f = jax.jit(lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32))
    f(a, a).block_until_ready()
    best = min(_timed(lambda: f(a, a).block_until_ready()) for _ in range(5))
    return 2 * n**3 / best


# -- torch worker -------------------------------------------------------------------------------


class TorchSide:
    def __init__(self, shape: dict, dtype: str, device: str):
        import torch
        from transformers import BertConfig, BertForMaskedLM

        self.torch = torch
        torch.manual_seed(0)
        if device == "cpu":
            torch.set_num_threads(os.cpu_count() or 1)  # both cores, as a user would
        self.device = torch.device(device)
        config = BertConfig(vocab_size=shape["vocab"], hidden_size=shape["hidden"],
                            num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                            intermediate_size=shape["mlp"],
                            hidden_dropout_prob=shape.get("dropout", 0.0),
                            attention_probs_dropout_prob=0.0,
                            max_position_embeddings=max(512, shape["seq"]), type_vocab_size=2,
                            position_embedding_type="absolute")
        self.model = BertForMaskedLM(config).to(self.device).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.01)
        self.autocast = dtype == "bfloat16"
        self.batches = []
        for raw in make_batches(shape, 4):
            ids = torch.from_numpy(raw["input_ids"].astype(np.int64)).to(self.device)
            labels = torch.where(torch.from_numpy(raw["weights"] > 0).to(self.device), ids, -100)
            self.batches.append((ids, labels))
        self.n = 0

    def _sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def run(self, steps: int) -> list[float]:
        torch = self.torch

        def one():
            ids, labels = self.batches[self.n % len(self.batches)]
            self.n += 1
            self.opt.zero_grad(set_to_none=True)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
                self.loss = self.model(input_ids=ids, labels=labels).loss
            self.loss.backward()
            self.opt.step()
            self._sync()

        times = alternate.timed_calls(one, steps)
        self.loss = float(self.loss.detach())
        return times

    def matmul_peak(self, dtype: str, n: int) -> float:
        torch = self.torch
        dt = torch.bfloat16 if dtype == "bfloat16" else torch.float32
        a = torch.ones((n, n), dtype=dt, device=self.device)
        a @ a
        self._sync()
        return 2 * n**3 / min(_timed(lambda: (a @ a, self._sync())) for _ in range(5))


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def worker(side: str, shape_name: str, dtype: str, device: str, peak_n: int) -> None:
    """Line protocol on stdin/stdout: the parent sends 'run N' / 'peak' / 'quit'."""
    shape = SHAPES[shape_name]
    t0 = time.perf_counter()
    impl = (PosjaxSide if side == "posjax" else TorchSide)(shape, dtype, device)
    impl.run(2)  # compile / warm up (posjax: the jit compile; torch: allocator, autocast caches)
    reply = dict(ready_s=time.perf_counter() - t0)
    if side == "posjax":
        reply["flops"] = impl.flops(shape)
    alternate.serve(reply, {
        "run": lambda n: dict(times=impl.run(int(n)), loss=impl.loss),
        "peak": lambda: dict(peak=impl.matmul_peak(dtype, peak_n))})


# -- parent -------------------------------------------------------------------------------------


class Worker(alternate.Worker):
    def __init__(self, side: str, args, dtype: str):
        env = dict(os.environ)
        if args.device == "cpu":
            env["JAX_PLATFORMS"] = "cpu"
        elif side == "posjax":
            # Both workers hold the GPU at once (they alternate): jax's default preallocation
            # (75%, 90% under bench/device.sh) would leave torch too little for BERT-base.
            env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = "0.45"
        if args.huge_pages == "both" or args.huge_pages == side:
            # What train.py and eval.py do for posjax (posjax/host_memory.py); torch's CPU
            # allocator faults its pages in the same way, so by default it gets the same.
            tunables = host_memory.tunables_here(env)
            if tunables is not None:
                env["GLIBC_TUNABLES"] = tunables
        self.huge_pages = "glibc.malloc.hugetlb" in env.get("GLIBC_TUNABLES", "")
        cmd = [sys.executable, "-m", "bench.peer_throughput", "--worker", side,
               f"--shape={args.shape}", f"--dtypes={dtype}", f"--device={args.device}",
               f"--peak_n={args.peak_n}"]
        if args.batch:
            cmd.append(f"--batch={args.batch}")
        super().__init__(side, cmd, env, os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))


def compare(args, dtype: str, shape: dict) -> dict:
    # One worker at a time while the other waits: start (compile) sequentially too.
    pj = Worker("posjax", args, dtype)
    pj_ready = pj.read()
    th = Worker("torch", args, dtype)
    th_ready = th.read()
    workers = {"posjax": pj, "torch": th}
    try:
        times, last = alternate.alternate(workers, args.rounds, f"run {args.steps}")
        losses = {name: answer["loss"] for name, answer in last.items()}
        peak = max(pj.ask("peak")["peak"], th.ask("peak")["peak"])
    finally:
        pj.close()
        th.close()
    tokens = shape["batch"] * shape["seq"]
    out = dict(dtype=dtype, peak=peak, flops=pj_ready["flops"])
    for name in times:
        med = statistics.median(t for t, _ in times[name])
        cpu = statistics.median(c for _, c in times[name])
        out[name] = dict(step_s=med, cpu_s=cpu, tokens_s=tokens / med,
                         mfu=pj_ready["flops"] / med / peak,
                         ready_s=(pj_ready if name == "posjax" else th_ready)["ready_s"],
                         loss=losses[name], n=len(times[name]),
                         huge_pages=(pj if name == "posjax" else th).huge_pages)
    out["ratio"] = out["posjax"]["tokens_s"] / out["torch"]["tokens_s"]
    out["cpu_ratio"] = out["torch"]["cpu_s"] / out["posjax"]["cpu_s"]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--shape", default="small", choices=sorted(SHAPES))
    p.add_argument("--batch", type=int, default=0, help="override the shape's batch")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--rounds", type=int, default=4, help="alternations of the two sides")
    p.add_argument("--steps", type=int, default=3, help="timed steps per side per round")
    p.add_argument("--peak_n", type=int, default=0, help="matmul size for the peak "
                   "(default 2048 on CPU, 8192 on CUDA)")
    p.add_argument("--huge_pages", default="both", choices=("both", "posjax", "none"),
                   help="which workers start with glibc's huge-page malloc tunable "
                   "(posjax/host_memory.py; train.py sets it for posjax)")
    p.add_argument("--worker", choices=("posjax", "torch"), help=argparse.SUPPRESS)
    args = p.parse_args()
    args.peak_n = args.peak_n or (2048 if args.device == "cpu" else 8192)
    shape = dict(SHAPES[args.shape])
    if args.batch:
        shape["batch"] = args.batch
        SHAPES[args.shape] = shape
    if args.worker:
        worker(args.worker, args.shape, args.dtypes, args.device, args.peak_n)
        return
    print(f"shape {args.shape}: {shape}; device {args.device}; {os.cpu_count()} CPU cores; "
          f"load average at start {os.getloadavg()}", flush=True)
    results = []
    for dtype in args.dtypes.split(","):
        r = compare(args, dtype, shape)
        results.append(r)
        print(f"{dtype}: matmul peak {r['peak'] / 1e9:.0f} GFLOP/s, model FLOPs/step "
              f"{r['flops'] / 1e9:.1f} G", flush=True)
        for name in ("posjax", "torch"):
            s = r[name]
            print(f"  {name:6s} median step {s['step_s'] * 1e3:7.1f} ms over {s['n']} steps, "
                  f"{s['tokens_s']:7.0f} tokens/s, MFU {100 * s['mfu']:.1f}%, "
                  f"process CPU {s['cpu_s']:.2f} s/step, "
                  f"start+warm-up {s['ready_s']:.0f} s, last loss {s['loss']:.3f}, "
                  f"huge-page malloc {'on' if s['huge_pages'] else 'off'}", flush=True)
    print(f"load average at end {os.getloadavg()}")
    for r in results:  # CPU seconds: less sensitive to a loaded machine than wall time
        print(f"ratio posjax/torch tokens/s, {r['dtype']}: {r['ratio']:.2f}x "
              f"(by process CPU seconds per step: {r['cpu_ratio']:.2f}x)")


if __name__ == "__main__":
    main()
