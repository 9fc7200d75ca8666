"""Unsupported architectures, missing files and bad options: ConfigError with one clear line
naming what was found; the CLI turns it into one stderr line and exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from posjax.convert.__main__ import main
from posjax.errors import ConfigError


def _write_config(path, **fields):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(fields, f)
    return str(path)


def _cli(capsys, *argv):
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    return code, err


def test_unsupported_architecture(tmp_path, capsys):
    d = _write_config(tmp_path / "gpt", model_type="gpt2", architectures=["GPT2LMHeadModel"])
    from posjax import pretrained

    with pytest.raises(ConfigError, match="model_type='gpt2'.*bert, roberta, albert, roformer, nezha"):
        pretrained.load(d)
    code, err = _cli(capsys, "--hf", d, "--out", str(tmp_path / "out"))
    assert code == 2 and len(err.splitlines()) == 1 and "gpt2" in err
    assert not os.path.exists(tmp_path / "out")


def test_missing_weights_names_what_was_found(tmp_path, capsys):
    d = _write_config(tmp_path / "bert", model_type="bert", vocab_size=50, hidden_size=8,
                      num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
    open(os.path.join(d, "vocab.txt"), "w").close()
    code, err = _cli(capsys, "--hf", d, "--out", str(tmp_path / "out"))
    assert code == 2 and len(err.splitlines()) == 1
    assert "model.safetensors" in err and "found: config.json, vocab.txt" in err


def test_missing_config_json(tmp_path, capsys):
    d = tmp_path / "empty"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"")
    code, err = _cli(capsys, "--hf", str(d), "--out", str(tmp_path / "out"))
    assert code == 2 and len(err.splitlines()) == 1 and "config.json" in err


@pytest.mark.parametrize("fields, name", [
    (dict(position_biased_input=True), "position_biased_input"),
    (dict(conv_kernel_size=3), "conv_kernel_size"),
    (dict(embedding_size=16), "embedding_size"),
])
def test_deberta_variants_posjax_cannot_reproduce(tmp_path, fields, name):
    from posjax.convert.hf_config import posjax_fields

    hf = dict(model_type="deberta-v2", vocab_size=50, hidden_size=32, num_hidden_layers=1,
              num_attention_heads=4, intermediate_size=16, relative_attention=True,
              position_biased_input=False, pos_att_type=["c2p", "p2c"])
    hf.update(fields)
    with pytest.raises(ConfigError, match=name):
        posjax_fields(hf)


def test_bert_relative_key_and_albert_groups_refused():
    from posjax.convert.hf_config import posjax_fields

    base = dict(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                intermediate_size=16)
    with pytest.raises(ConfigError, match="position_embedding_type"):
        posjax_fields(dict(base, model_type="bert", position_embedding_type="relative_key"))
    with pytest.raises(ConfigError, match="num_hidden_groups"):
        posjax_fields(dict(base, model_type="albert", num_hidden_groups=2))
    with pytest.raises(ConfigError, match="hidden_act"):
        posjax_fields(dict(base, model_type="bert", hidden_act="mish"))


def test_cli_writes_workdir_and_refuses_to_overwrite(cases, tmp_path, capsys):
    hf_dir = cases["bert"].hf_dir
    out = str(tmp_path / "wd")
    code, err = _cli(capsys, "--hf", hf_dir, "--out", out, "--extend", "1024")
    assert code == 0, err
    assert {"config.json", "vocab.txt", "convert.json", "checkpoints"} <= set(os.listdir(out))
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["position"] == {"name": "hierarchical", "rows": 64, "alpha": 0.4}
    assert cfg["model"]["max_length"] == 1024 and cfg["data"]["seq_len"] == 64
    code, err = _cli(capsys, "--hf", hf_dir, "--out", out)
    assert code == 2 and "never overwrites" in err and len(err.splitlines()) == 1


def test_bad_extension_options(cases):
    model = cases["bert"].model
    with pytest.raises(ConfigError, match="method"):
        model.extend(128, method="yarn")
    with pytest.raises(ConfigError, match="alpha"):
        model.extend(128, alpha=0.5)
    with pytest.raises(ConfigError, match="rows\\*\\*2"):
        model.extend(64 * 64 + 1)
    with pytest.raises(ConfigError, match="input_ids"):
        model.encode(np.full((1, 4), 10_000, np.int32))


@pytest.mark.slow
def test_loading_a_converted_workdir_logs_no_warning(cases, tmp_path, capsys):
    """A fresh process loads what the CLI wrote without orbax's 'Metadata file does not
    exist' WARNING (a Checkpointer looks for step metadata inside the item directory)."""
    out = str(tmp_path / "wd")
    code, err = _cli(capsys, "--hf", cases["bert"].hf_dir, "--out", out)
    assert code == 0, err
    program = ("import sys; from posjax import pretrained; "
               "print(pretrained.load(sys.argv[1]).config.model.num_layers)")
    r = subprocess.run([sys.executable, "-c", program, out], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert r.returncode == 0 and r.stdout.strip() == "2", r.stderr
    assert "WARNING" not in r.stderr, r.stderr
