r"""Long inputs on CPU: posjax's `pretrained.encode` against transformers' ModernBertModel with
its default attention (sdpa), side by side, in one command.

    nice -n 19 python -m bench.long_attention_peer                 # bench/README.md's table
    python -m bench.long_attention_peer --lengths=2048 --layouts=global --rounds=2   # quick

A random ModernBERT (6 layers, hidden 384, 6 heads, MLP 576, vocab 8000) in two layouts,
every layer global and global every 3rd layer with a local window of 128, is saved with
transformers, converted with `python -m posjax.convert` and loaded with
`posjax.pretrained.load`. Per (layout, length): one worker process per side loads its model,
runs one untimed forward (posjax: the compile), writes its output; the parent checks that
the outputs agree (--atol) before anything is timed, then alternates the two workers
(bench/alternate.py), --rounds blocks of --steps forwards each: median seconds per forward,
tokens/s, the ratio posjax/HF, by wall time and by process CPU time (the machine may be
shared: CPU seconds do not count waiting for a core), and each worker's peak RSS (its whole
life: model, compile, forwards). --train_length adds one training step per layout (forward
and backward of mean(hidden ** 2) to every parameter, no optimizer) at that length;
--remat and --memory_scheduler set posjax's model.remat and XLA:CPU's memory-minimizing
scheduler for it (bench/long_attention_peer.md, training memory). The posjax worker starts as
posjax's entry points do (posjax/startup.py): glibc's huge-page tunable (--huge_pages) and
the compiler's freed heap returned after each compile.

Batch 1, float32, an all-ones attention mask, all threads on both sides. --out appends one
JSON line per measured row (rows already there are skipped: rerun to resume).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from bench import alternate
from posjax import host_memory

MODEL = dict(vocab_size=8000, hidden_size=384, num_hidden_layers=6, num_attention_heads=6,
             intermediate_size=576, max_position_embeddings=16384, local_attention=128,
             pad_token_id=0, bos_token_id=1, eos_token_id=2, sep_token_id=2, cls_token_id=1)
LAYOUTS = {"global": 1, "local": 3}  # global_attn_every_n_layers
LAYOUT_NAMES = {"global": "every layer global", "local": "global every 3rd, window 128"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEMORY_SCHEDULER = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
# --huge_pages: which workers start with glibc's huge-page tunable. 'posjax' is what users get:
# train.py, eval.py and the experiment drivers set it for themselves, transformers does not.
HUGE_PAGES = {"posjax": ("posjax",), "both": ("posjax", "torch"), "none": ()}


def inputs(length: int, seed: int = 0):
    """One row of random ids (>= 5, past the specials) and its all-ones mask."""
    ids = np.random.default_rng(seed).integers(5, MODEL["vocab_size"], (1, length))
    return ids.astype(np.int32), np.ones((1, length), np.int32)


# -- the workers --------------------------------------------------------------------------------


class PosjaxSide:
    def __init__(self, workdir: str, length: int, train: bool, attention: str,
                 remat: str = "none"):
        import jax

        from posjax import pretrained

        self.jax = jax
        self.model = pretrained.load(workdir)
        if attention != "auto" or remat != "none":  # another path or remat than the default
            m = self.model
            m.config.model.attention = attention
            m.config.model.remat = None if remat == "none" else remat
            self.model = pretrained.Pretrained(m.config, m.params, vocab=m.vocab,
                                               metadata=m.metadata)
        self.ids, self.mask = inputs(length)
        self.train = train
        if train:
            self.step = self._train_step()

    def _train_step(self):
        """jit(grad) of mean(hidden ** 2) over every parameter, as the encoder trains."""
        import jax
        import jax.numpy as jnp
        from flax import nnx

        m = self.model
        graphdef, state = nnx.split(m.module())  # the loaded weights, as a user's loop would
        batch = m.batch(self.ids, self.mask)
        dense = bool(np.all(batch["segment_ids"] == 1))  # what encode() decides, see there

        def loss(state):
            hidden = nnx.merge(graphdef, state).encoder(batch, dense_rows=dense)
            return jnp.mean(jnp.square(hidden.astype(jnp.float32)))

        self.grad, self.state = jax.jit(jax.grad(loss)), state  # bench/dot_profile.py reads both

        def step():
            jax.block_until_ready(self.grad(state))  # nothing to compare: returns None

        return step

    def forward(self):
        if self.train:
            return self.step()
        return self.model.encode(self.ids, self.mask)


class TorchSide:
    def __init__(self, hf_dir: str, length: int, train: bool):
        import torch
        from transformers import ModernBertModel

        torch.set_num_threads(os.cpu_count() or 1)  # all threads, as a user would
        self.torch = torch
        self.model = ModernBertModel.from_pretrained(hf_dir)  # default attention: sdpa
        ids, mask = inputs(length)
        self.ids, self.mask = torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(mask)
        self.train = train
        self.model.train(train)

    def forward(self):
        torch = self.torch
        if self.train:
            self.model.zero_grad(set_to_none=True)
            hidden = self.model(input_ids=self.ids, attention_mask=self.mask).last_hidden_state
            torch.mean(torch.square(hidden)).backward()
            return None
        with torch.inference_mode():
            out = self.model(input_ids=self.ids, attention_mask=self.mask).last_hidden_state
        return out.numpy()


def worker(args) -> None:
    train = args.train
    if args.worker == "posjax":
        from posjax import startup  # here: the torch worker imports no jax

        if args.compiler_heap == "release":
            # What train.py and eval.py do for themselves: the compiler's freed heap is handed
            # back after each compile, so the step's buffers do not peak on top of it.
            startup.release_compiler_memory()
        side = PosjaxSide(args.model_dir, args.length, train, args.attention, args.remat)
    else:
        side = TorchSide(args.model_dir, args.length, train)
    first = side.forward()  # untimed: posjax compiles, torch warms its allocator
    ready = dict(attention=_posjax_path(args) if args.worker == "posjax" else "sdpa")
    if first is not None:
        np.save(args.output, np.asarray(first, np.float32))
    alternate.serve(ready, {"run": lambda n: dict(times=alternate.timed_calls(side.forward,
                                                                             int(n)))})


def _posjax_path(args) -> str:
    """The attention implementation encode() runs for the global layers at this length."""
    import posjax.kernels  # noqa: F401  registers the kernel 'auto' picks on accelerators
    from posjax.attention import choose_implementation
    from posjax.positions import make

    return choose_implementation(args.attention, make("rope"), args.length)


# -- the parent ---------------------------------------------------------------------------------


def build_models(tmp: str) -> dict[str, tuple[str, str]]:
    """Per layout (HF dir, posjax workdir): random weights saved by transformers, converted by
    posjax's command line."""
    import torch
    from transformers import ModernBertConfig, ModernBertModel

    out = {}
    for layout, every in LAYOUTS.items():
        torch.manual_seed(0)
        hf_dir, pj_dir = os.path.join(tmp, f"hf_{layout}"), os.path.join(tmp, f"posjax_{layout}")
        config = ModernBertConfig(global_attn_every_n_layers=every, **MODEL)
        ModernBertModel(config).save_pretrained(hf_dir)
        subprocess.run([sys.executable, "-m", "posjax.convert", "--hf", hf_dir, "--out", pj_dir],
                       check=True, cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"),
                       stdout=subprocess.DEVNULL)
        out[layout] = (hf_dir, pj_dir)
    return out


def _start(side: str, model_dir: str, length: int, train: bool, output: str,
           args) -> alternate.Worker:
    cmd = [sys.executable, "-m", "bench.long_attention_peer", "--worker", side,
           f"--model_dir={model_dir}", f"--length={length}", f"--output={output}",
           f"--attention={args.attention}", f"--remat={args.remat}",
           f"--compiler_heap={args.compiler_heap}"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    if side in HUGE_PAGES[args.huge_pages]:
        # What posjax's entry points do for themselves (posjax/host_memory.py); the tunable is
        # read when the worker starts.
        env["GLIBC_TUNABLES"] = host_memory.tunables_here(env) or env.get("GLIBC_TUNABLES", "")
    if train:
        cmd.append("--train")
        if side == "posjax" and args.memory_scheduler:
            # XLA reads its flags once, when jax starts: the worker's environment.
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {MEMORY_SCHEDULER}".strip()
    return alternate.Worker(side, cmd, env, ROOT)


def measure(models, layout: str, length: int, train: bool, args, tmp: str) -> dict:
    """One row: parity first (forwards only), then alternating timed blocks, peak RSS."""
    hf_dir, pj_dir = models[layout]
    outputs = {side: os.path.join(tmp, f"{side}.npy") for side in ("posjax", "torch")}
    workers, ready = {}, {}
    try:
        # One at a time: the second starts (loads, compiles) after the first is ready.
        for side, directory in (("posjax", pj_dir), ("torch", hf_dir)):
            if side in args.sides:
                workers[side] = _start(side, directory, length, train, outputs[side], args)
                ready[side] = workers[side].read()
        row = dict(layout=layout, length=length, kind="train" if train else "forward",
                   attention=ready["posjax"]["attention"])
        if not train and "torch" in workers:
            diff = float(np.abs(np.load(outputs["posjax"]) - np.load(outputs["torch"])).max())
            row["max_abs_diff"] = diff
            if not diff <= args.atol:
                raise SystemExit(f"parity: {layout} at {length}: max |posjax - HF| = {diff:.3g} "
                                 f"> --atol={args.atol}")
        steps = args.steps or (3 if length <= 2048 else 1)
        times, _ = alternate.alternate(workers, args.rounds, f"run {steps}")
        rss = {side: w.ask("rss")["peak_rss_mib"] for side, w in workers.items()}
    finally:
        for w in workers.values():
            w.close()
    for side in workers:
        # warm: each block's calls after its first (the first one follows the other side's
        # block, whose memory and caches it has to take back: a cost a user's loop, one
        # process stepping back to back, does not pay)
        warm = [t for i, (t, _) in enumerate(times[side]) if i % steps] or [times[side][0][0]]
        row[side] = dict(s=statistics.median(t for t, _ in times[side]),
                         cpu_s=statistics.median(c for _, c in times[side]),
                         warm_s=statistics.median(warm), n=len(times[side]),
                         times=[round(t, 4) for t, _ in times[side]], rss_mib=rss[side])
    if "torch" in workers:
        row["ratio"] = row["torch"]["s"] / row["posjax"]["s"]  # tokens/s posjax / HF
        row["cpu_ratio"] = row["torch"]["cpu_s"] / row["posjax"]["cpu_s"]
        row["warm_ratio"] = row["torch"]["warm_s"] / row["posjax"]["warm_s"]
    return row


def _train_options(args) -> dict:
    return dict(remat=args.remat, memory_scheduler=args.memory_scheduler)


def _heap(row: dict) -> str:
    """Rows from before --compiler_heap kept it (and measured peak RSS with getrusage, which
    counted the parent's peak too)."""
    return row.get("compiler_heap", "keep")


def _key(row: dict) -> tuple:
    """What makes a row (--out resumes past the rows already there; rows from before
    --huge_pages ran without the tunable on either side)."""
    return (row["layout"], row["length"], row["kind"], row["requested"],
            row.get("remat", "none"), row.get("memory_scheduler", False),
            row.get("huge_pages", "none"), _heap(row))


def _path(row: dict) -> str:
    """posjax's attention path, for a training row its remat and scheduler if set, and which
    sides ran with huge pages."""
    extra = [f"remat {row['remat']}"] if row.get("remat", "none") != "none" else []
    extra += ["memory scheduler"] if row.get("memory_scheduler") else []
    pages = row.get("huge_pages", "none")
    extra += [{"posjax": "huge pages", "both": "huge pages (HF too)"}[pages]] if pages != "none" else []
    extra += ["compiler heap kept"] if _heap(row) == "keep" else []
    return ", ".join([row["attention"], *extra])


def table(rows: list[dict]) -> str:
    lines = ["| layout | length | step | posjax path | posjax s | HF s | posjax/HF tokens/s "
             "(by CPU s; warm) | peak RSS posjax/HF MiB | max abs diff |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p, t = r["posjax"], r.get("torch")  # no torch: posjax alone (--sides=posjax)
        diff = f"{r['max_abs_diff']:.1e}" if "max_abs_diff" in r else "-"
        warm = f"; {r['warm_ratio']:.2f}x" if "warm_ratio" in r else ""
        ratio = f"{r['ratio']:.2f}x ({r['cpu_ratio']:.2f}x{warm})" if t else "-"
        hf_s, hf_rss = (f"{t['s']:.3f}", f"{t['rss_mib']:.0f}") if t else ("not run", "-")
        lines.append(f"| {LAYOUT_NAMES[r['layout']]} | {r['length']} | {r['kind']} | "
                     f"{_path(r)} | {p['s']:.3f} | {hf_s} | {ratio} | "
                     f"{p['rss_mib']:.0f}/{hf_rss} | {diff} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layouts", default="global,local")
    p.add_argument("--lengths", default="2048,8192,16384")
    p.add_argument("--train_length", type=int, default=2048, help="0: no training rows")
    p.add_argument("--rounds", type=int, default=3, help="alternations of the two sides")
    p.add_argument("--steps", type=int, default=0,
                   help="forwards per side per round (default 3 up to 2048 tokens, else 1)")
    p.add_argument("--atol", type=float, default=1e-4, help="parity: max |posjax - HF|")
    p.add_argument("--out", default="", help="append one JSON line per row; skip rows there")
    p.add_argument("--sides", default="posjax,torch", choices=("posjax,torch", "posjax"),
                   help="posjax alone: its time and memory, no parity, no ratio (a length "
                   "whose HF forward would not fit in memory)")
    p.add_argument("--attention", default="auto", choices=("auto", "rows", "chunked"),
                   help="posjax's model.attention (auto: what encode picks by itself)")
    p.add_argument("--remat", default="none", choices=("none", "layer", "full"),
                   help="posjax's model.remat for the training rows (posjax/models/remat.py)")
    p.add_argument("--memory_scheduler", action="store_true",
                   help=f"posjax's training worker runs with XLA_FLAGS={MEMORY_SCHEDULER} "
                   "(XLA:CPU's memory-minimizing scheduler; without it remat saves nothing)")
    p.add_argument("--huge_pages", default="posjax", choices=tuple(HUGE_PAGES),
                   help="workers started with glibc.malloc.hugetlb=1: posjax (as its entry "
                   "points run), both (HF too: the same allocator setting), none")
    p.add_argument("--compiler_heap", default="release", choices=("release", "keep"),
                   help="posjax's worker hands the compiler's freed heap back after each "
                   "compile, as its entry points do (posjax/startup.py), or keeps it")
    p.add_argument("--worker", choices=("posjax", "torch"), help=argparse.SUPPRESS)
    p.add_argument("--model_dir", help=argparse.SUPPRESS)
    p.add_argument("--length", type=int, help=argparse.SUPPRESS)
    p.add_argument("--output", help=argparse.SUPPRESS)
    p.add_argument("--train", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    layouts = args.layouts.split(",")
    bad = [x for x in layouts if x not in LAYOUTS]
    if bad:
        p.exit(2, f"--layouts: {bad[0]!r}; allowed: {', '.join(LAYOUTS)}\n")
    lengths = [int(n) for n in args.lengths.split(",") if n]
    plan = [(layout, n, False) for n in lengths for layout in layouts]
    plan += [(layout, args.train_length, True) for layout in layouts if args.train_length]
    done = []
    if args.out and os.path.exists(args.out):
        with open(args.out) as f:
            done = [json.loads(line) for line in f if line.strip()]
    have = {_key(r) for r in done}
    # Recorded as what the workers got: nothing where the tunable does not apply on this machine.
    pages = args.huge_pages if host_memory.tunables_here({}) is not None else "none"
    heap = args.compiler_heap if host_memory.glibc_malloc_trim() is not None else "keep"
    print(f"{os.cpu_count()} CPU cores, load average at start {os.getloadavg()}", flush=True)
    rows = list(done)
    with tempfile.TemporaryDirectory() as tmp:
        models = build_models(tmp)
        for layout, length, train in plan:
            row = dict(layout=layout, length=length, kind="train" if train else "forward",
                       requested=args.attention, huge_pages=pages, compiler_heap=heap,
                       **(_train_options(args) if train else {}))
            if _key(row) in have:
                continue
            row.update(measure(models, layout, length, train, args, tmp))
            row["load_average"] = os.getloadavg()
            rows.append(row)
            print(table([row]).splitlines()[-1], flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
    print(f"load average at end {os.getloadavg()}")
    print(table(rows))


if __name__ == "__main__":
    main()
