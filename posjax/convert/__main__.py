r"""python -m posjax.convert --hf DIR --out DIR [--extend N [--method M] [--alpha A]]
python -m posjax.convert --to_hf WORKDIR --out DIR [--overwrite] [--extend N ...]

--hf reads a Hugging Face model directory (config.json + model.safetensors, or
pytorch_model.bin when torch is installed, + vocab.txt if any) and writes a posjax workdir:
config.json, vocab.txt (posjax order: [PAD] [UNK] [CLS] [SEP] [MASK] first), convert.json
and a step-0 checkpoint that train.py resumes and eval.py reads:

    python train.py --config=configs/workdir.py:OUT --workdir=OUT

--to_hf goes back: a posjax workdir of a BERT, RoBERTa, RoFormer or ModernBERT model becomes
a folder transformers.AutoModel / AutoModelForMaskedLM / AutoTokenizer load (config.json,
model.safetensors, tokenizer files; posjax/convert/to_hf). It needs transformers and torch.

--extend N writes the length-extended model instead (learned tables -> hierarchical, RoPE ->
dynamic NTK by default; see posjax/pretrained.py); with --to_hf an extended table is
written as a plain table of N rows. Exit codes: 0 written, 2 unsupported architecture,
missing file or bad option (one line on stderr).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from posjax.config.cli import quiet_platforms
from posjax.errors import ConfigError


def parse(argv):
    # the docstring after its two usage lines (argparse prints its own), as written
    p = argparse.ArgumentParser(prog="python -m posjax.convert",
                                description=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--hf", help="Hugging Face model directory -> posjax workdir")
    source.add_argument("--to_hf", help="posjax workdir -> Hugging Face folder")
    p.add_argument("--out", required=True, help="new (or empty) output directory")
    p.add_argument("--overwrite", action="store_true",
                   help="--to_hf only: replace a non-empty --out")
    p.add_argument("--extend", type=int, default=None, help="serve this many positions")
    p.add_argument("--method", default=None, help="extension method (default per scheme)")
    p.add_argument("--alpha", type=float, default=0.4, help="hierarchical alpha (not 0.5)")
    return p.parse_args(argv)


def _to_hf(args) -> str:
    from posjax.convert import pretrained, to_hf

    if os.path.abspath(args.out) == os.path.abspath(args.to_hf):
        raise ConfigError("--out", args.out, "a folder other than the --to_hf workdir")
    to_hf.check_out(args.out, args.overwrite)  # before reading gigabytes
    model = pretrained.load(args.to_hf)
    if args.extend is not None:
        model = model.extend(args.extend, method=args.method, alpha=args.alpha)
    path, export = to_hf.export(model, args.out, overwrite=args.overwrite)
    for note in export.notes:
        logging.warning(note)
    return to_hf.summary(path, export)


def _to_posjax(args) -> str:
    from posjax.convert import pretrained, store as wd

    if args.overwrite:
        raise ConfigError("--overwrite", True, "only with --to_hf (posjax never overwrites a "
                          "workdir)")
    wd.check_empty(args.out)  # before reading gigabytes
    model = pretrained.load(args.hf)
    if args.extend is not None:
        model = model.extend(args.extend, method=args.method, alpha=args.alpha)
    out = model.save(args.out)
    m = model.config.model
    return (f"wrote {out}: {model.metadata.get('model_type')} {m.num_layers} layers x {m.hidden}, "
            f"position '{model.config.position.name}', max_length {m.max_length}, "
            f"vocab {m.vocab_size}{'' if model.tokenizer else ' (no tokenizer)'}")


def main(argv=None) -> int:
    quiet_platforms()  # no libtpu start-up errors on a machine without TPU chips
    args = parse(argv)
    logging.basicConfig(level=logging.WARNING, format="posjax.convert: warning: %(message)s")
    try:
        line = _to_hf(args) if args.to_hf else _to_posjax(args)
    except ConfigError as e:
        sys.stderr.write(f"posjax.convert: error: {e}\n")
        return 2
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
