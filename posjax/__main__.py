"""`python -m posjax list [schemes|configs|methods|tasks]` (or `posjax list`): what there is to pick.

  schemes   every registered position scheme: its hooks (and decoder methods), whether it
            serves causal models only, its (row, column) positions, its config fields with
            their defaults, and the length-extension methods eval.py and Pretrained.extend
            apply to it
  configs   configs/*.py and configs/experiments/*.py of the repository checkout in the
            current directory: file, corpus (from get_config()) and the docstring's first
            paragraph after its 'Corpus:' line
  methods   every length-extension method with one line and the schemes it applies to
  tasks     every algorithmic length-generalization task: its Chomsky level, input and output
            sizes, and its input and output lengths for a requested length L

Nothing here builds a model or imports flax. A wrong section is one line on stderr, exit 2.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import os
import re
import sys
from typing import Optional

from posjax import positions, schema
from posjax.data import algorithmic
from posjax.errors import ConfigError
from posjax.evaluation import methods

SECTIONS = ("schemes", "configs", "methods", "tasks")
CONFIG_DIRS = ("configs", os.path.join("configs", "experiments"))


def scheme_lines() -> list[str]:
    out = []
    for name in positions.names():
        cls = positions.scheme_class(name)
        traits = [f"hooks: {', '.join(cls.hook_names()) or '(none)'}"]
        if cls.causal_only:
            traits.append("causal models only")
        if cls.position_dims != 1:
            traits.append(f"{cls.position_dims}-D positions")
        if cls.decoder_query is not positions.Scheme.decoder_query:
            traits.append("decoder methods")
        out.append(f"{name}  ({'; '.join(traits)})")
        fields = positions.config_fields(cls)
        out.append("    fields: " + (", ".join(f"{k}={v!r}" for k, v in fields.items())
                                     or "(none)"))
        out.append(f"    methods: {', '.join(methods.fitting(name))}"
                   f" (Pretrained.extend default: {cls.default_extension})")
    return out


def method_lines() -> list[str]:
    out = []
    width = max(len(m) for m in methods.method_names())
    for method, doc in methods.method_docs().items():
        owners = [n for n in positions.names()
                  if method in positions.scheme_class(n).extend_methods]
        scope = f" [{', '.join(owners)}]" if owners else " [every scheme]"
        out.append(f"{method:<{width}}  {doc}{scope}")
    return out


def task_lines() -> list[str]:
    out = []
    for name in algorithmic.names():
        task = algorithmic.get(name)
        out.append(f"{name}  ({task.level}; {task.input_size} input symbols, {task.output_size} "
                   f"output classes; input {task.input_rule}; output {task.output_rule})")
    return out


def _corpus(config) -> str:
    if not hasattr(config, "keys") or "data" not in config:  # an experiment: runs of configs
        runs = config["runs"] if hasattr(config, "keys") and "runs" in config else None
        if runs is None:
            return "?"
        return ", ".join(sorted({_corpus(run) for run in runs.values()}))
    data = schema.view(config).data
    source = {"text_dir": data.path, "tfds": data.tfds_name}.get(data.corpus)
    return f"{data.corpus} ({source})" if source else str(data.corpus)


def _load_config(path: str):
    """get_config() of the file at `path` (its prints silenced), or the exception it raised."""
    name = "_posjax_list_" + path.replace(os.sep, "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            spec.loader.exec_module(module)
            return module.get_config()
    except Exception as e:  # a listing reports a config it cannot load instead of stopping
        return e


def _has_get_config(tree: ast.Module) -> bool:
    """Whether a config file defines get_config or imports it (base.py: the defaults')."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "get_config":
            return True
        if isinstance(node, ast.ImportFrom) and any(a.name == "get_config" and a.asname is None
                                                    for a in node.names):
            return True
    return False


def config_lines(root: str = ".") -> list[str]:
    if not os.path.isdir(os.path.join(root, "configs")):
        return [f"no configs/ folder in {os.path.abspath(root)}: the configs are part of the "
                "repository checkout, not the installed package (run from its root)"]
    out = []
    for folder in CONFIG_DIRS:
        files = sorted(f for f in os.listdir(os.path.join(root, folder))
                       if f.endswith(".py") and not f.startswith("_"))
        for f in files:
            path = os.path.join(folder, f)
            with open(os.path.join(root, path), encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
            if not _has_get_config(tree):
                continue  # a helper module (experiments/common.py), not a config
            # Stock configs open with a 'Corpus: ...' line (shown as [corpus]); the purpose is
            # first sentence of the first other paragraph.
            paragraphs = [" ".join(p.split()) for p in (ast.get_docstring(tree) or "").split("\n\n")]
            purpose = next((p for p in paragraphs if p and not p.startswith("Corpus:")), "")
            config = _load_config(os.path.join(root, path))
            stated = next((p.removeprefix("Corpus: ").rstrip(".") for p in paragraphs
                           if p.startswith("Corpus:")), None)
            if not isinstance(config, Exception):
                corpus = _corpus(config)
            elif stated and isinstance(config, ConfigError) and config.field == "config variant":
                # needs its ':ARG' (workdir.py): the docstring's Corpus line says what it reads
                corpus = f"{stated}; needs its :ARG"
            else:
                corpus = (f"(get_config() failed: "
                          f"{str(config).splitlines()[0] if str(config) else type(config).__name__})")
            # a paragraph that introduces a list or a command ends with ':'; the line does not
            first_sentence = re.split(r"(?<! al)\.\s+(?=[A-Z])", purpose)[0].rstrip(".:")
            out.append(f"{path}  [{corpus}]  {first_sentence}")
    return out


def listing(section: Optional[str] = None) -> str:
    if section is not None and section not in SECTIONS:
        raise ConfigError("section", section, positions.suggest(section, SECTIONS))
    parts = []
    for name, lines in (("schemes", scheme_lines), ("configs", config_lines),
                        ("methods", method_lines), ("tasks", task_lines)):
        if section in (None, name):
            parts.append(f"== {name} ==\n" + "\n".join(lines()))
    return "\n\n".join(parts) + "\n"


def main(argv: Optional[list] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    usage = f"usage: posjax list [{'|'.join(SECTIONS)}]"
    if any(a in ("-h", "--help") for a in argv) or argv == ["help"]:
        print(__doc__.strip("\n"))
        return 0
    if not argv or argv[0] != "list" or len(argv) > 2:
        print(usage, file=sys.stderr)
        return 2
    try:
        sys.stdout.write(listing(argv[1] if len(argv) == 2 else None))
    except ConfigError as e:
        print(f"posjax list: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
