r"""python -m posjax.convert --hf DIR --out DIR [--extend N [--method M] [--alpha A]]

Reads a Hugging Face model directory (config.json + model.safetensors, or pytorch_model.bin
when torch is installed, + vocab.txt if any) and writes a posjax workdir: config.json,
vocab.txt (posjax order: [PAD] [UNK] [CLS] [SEP] [MASK] first), convert.json and a step-0
checkpoint that train.py resumes and eval.py reads:

    python train.py --config=configs/workdir.py:OUT --workdir=OUT

--extend N writes the length-extended model instead (learned tables -> hierarchical, RoPE ->
dynamic NTK by default; see posjax/pretrained.py). Exit codes: 0 written, 2 unsupported
architecture, missing file or bad option (one line on stderr).
"""

from __future__ import annotations

import argparse
import logging
import sys

from posjax.errors import ConfigError


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m posjax.convert", description=__doc__.split("\n\n")[1])
    p.add_argument("--hf", required=True, help="Hugging Face model directory")
    p.add_argument("--out", required=True, help="new (or empty) posjax workdir")
    p.add_argument("--extend", type=int, default=None, help="serve this many positions")
    p.add_argument("--method", default=None, help="extension method (default per scheme)")
    p.add_argument("--alpha", type=float, default=0.4, help="hierarchical alpha (not 0.5)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    from posjax.cli import quiet_platforms

    quiet_platforms()  # no libtpu start-up errors on a machine without TPU chips
    args = parse(argv)
    logging.basicConfig(level=logging.WARNING, format="posjax.convert: warning: %(message)s")
    try:
        from posjax.convert import store as wd

        wd.check_empty(args.out)  # before reading gigabytes
        from posjax import pretrained

        model = pretrained.load(args.hf)
        if args.extend is not None:
            model = model.extend(args.extend, method=args.method, alpha=args.alpha)
        out = model.save(args.out)
    except ConfigError as e:
        sys.stderr.write(f"posjax.convert: error: {e}\n")
        return 2
    m = model.config.model
    print(f"wrote {out}: {model.metadata.get('model_type')} {m.num_layers} layers x {m.hidden}, "
          f"position '{model.config.position.name}', max_length {m.max_length}, "
          f"vocab {m.vocab_size}{'' if model.tokenizer else ' (no tokenizer)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
