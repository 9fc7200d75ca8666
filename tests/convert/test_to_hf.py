"""posjax -> Hugging Face (--to_hf): the tiny random HF models of conftest, converted to posjax,
exported back and loaded by transformers' AutoModel / AutoModelForMaskedLM / AutoTokenizer,
give the original torch outputs and posjax's (max abs error <= 1e-4 at real tokens); an
extended learned table and RoPE scalings give posjax's extended outputs past the original
length; what transformers cannot express is refused with one line and exit code 2."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
import transformers

from posjax.convert import to_hf
from posjax.convert.__main__ import main
from posjax.convert.to_hf import families
from posjax.errors import ConfigError

from tests.convert.conftest import LENGTH, real
from tests.convert.test_parity import TOL, posjax_inputs

FAMILY_CASES = ("bert", "roberta", "roformer", "modernbert", "modernbert-local",
                "modernbert-biased")
LONG = 100  # > the tiny models' 64 positions


@pytest.fixture(scope="module")
def exported(cases, tmp_path_factory):
    """arch (or arch:method for an extended model) -> exported folder, each made once."""
    root = tmp_path_factory.mktemp("to_hf")
    made: dict = {}

    def get(arch: str, method=None) -> str:
        key = f"{arch}:{method}" if method else arch
        if key not in made:
            model = cases[arch].model
            if method:
                model = model.extend(4 * model.max_length, method=method)
            made[key], _ = to_hf.export(model, str(root / key))
        return made[key]

    return get


def _torch(ids, mask, types) -> dict:
    t = lambda a: torch.from_numpy(np.asarray(a, np.int64))  # noqa: E731
    kwargs = {"input_ids": t(ids), "attention_mask": t(mask)}
    if types is not None:
        kwargs["token_type_ids"] = t(types)
    return kwargs


def _hidden(path: str, kwargs: dict) -> np.ndarray:
    with torch.no_grad():
        return transformers.AutoModel.from_pretrained(path).eval()(**kwargs).last_hidden_state.numpy()


def _long_inputs(case):
    """One row of LONG tokens past the original table (HF ids, posjax ids)."""
    ids = np.tile(case.ids[:1], (1, LONG // LENGTH + 1))[:, :LONG]
    return ids, case.model.hf_to_posjax(ids), np.ones_like(ids)


def _cli(capsys, *argv):
    capsys.readouterr()  # drop what building the cases printed
    code = main(list(argv))
    return code, capsys.readouterr().err.strip()


@pytest.fixture(scope="module")
def bert_workdir(cases, tmp_path_factory) -> str:
    return cases["bert"].model.save(str(tmp_path_factory.mktemp("wd") / "bert"))


@pytest.mark.slow
@pytest.mark.parametrize("arch", FAMILY_CASES)
def test_round_trip_matches_posjax_and_the_original(cases, exported, arch):
    case = cases[arch]
    path = exported(arch)
    kwargs = _torch(case.ids, case.mask, case.types)
    hidden = _hidden(path, kwargs)
    np.testing.assert_allclose(real(hidden, case.mask), real(case.hidden, case.mask), atol=TOL, rtol=0)
    ids, mask, types = posjax_inputs(case)
    ours = case.model.encode(ids, mask, types)
    np.testing.assert_allclose(real(hidden, mask), real(ours, mask), atol=TOL, rtol=0)
    with torch.no_grad():
        mlm = transformers.AutoModelForMaskedLM.from_pretrained(path).eval()
        logits = mlm(**kwargs).logits.numpy()
    np.testing.assert_allclose(real(logits, mask), real(case.logits, mask), atol=TOL, rtol=0)


def test_tokenizer_and_vocab_order(cases, exported):
    """The HF id order comes back (vocab.txt and word rows alike): AutoTokenizer's ids are
    the posjax tokenizer's ids mapped to HF ids."""
    model = cases["bert"].model
    path = exported("bert")
    tok = transformers.AutoTokenizer.from_pretrained(path)
    texts = ["w3 w17 W5", "w80"]
    ours, mask = model.tokenize(texts)
    theirs = tok(texts, padding=True, return_tensors="np")
    np.testing.assert_array_equal(theirs["attention_mask"], mask)
    np.testing.assert_array_equal(theirs["input_ids"], model.hf_ids[ours])
    with open(os.path.join(path, "vocab.txt")) as f:
        assert f.read().split("\n")[:11] == ["[PAD]"] + [f"[unused{i}]" for i in range(6)] + [
            "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tok.model_max_length == 64


@pytest.mark.slow  # saves and reads a workdir (orbax), ~10 s on 2 cores
def test_workdir_with_extended_table_exports_a_plain_table(cases, bert_workdir, tmp_path, capsys):
    """A workdir, extended to 2x by the CLI (hierarchical): the HF table has 128 rows and HF
    outputs at 100 tokens (past the original 64) equal posjax's extended model."""
    case = cases["bert"]
    out = str(tmp_path / "hf")
    code, err = _cli(capsys, "--to_hf", bert_workdir, "--out", out, "--extend", "128")
    assert code == 0, err
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["max_position_embeddings"] == 128
    hf_ids, ids, mask = _long_inputs(case)
    long = case.model.extend(128)
    assert long.config.position.name == "hierarchical"
    ours = long.encode(ids, mask)
    hidden = _hidden(out, _torch(hf_ids, mask, np.zeros_like(ids)))
    np.testing.assert_allclose(hidden, ours, atol=TOL, rtol=0)


def test_a_table_rewritten_to_the_new_length_exports_as_it_is(cases, tmp_path):
    """Extensions that rewrite the table itself (tiling, interpolation) leave a 'learned'
    model with max_length rows: exported row for row."""
    import ml_collections

    from posjax.pretrained import Pretrained

    case = cases["bert"]
    m = case.model
    config = ml_collections.ConfigDict(m.config.to_dict())
    config.model.max_length = 128
    emb = m.params["encoder"]["embeddings"]
    tiled = np.tile(np.asarray(emb["position"]["tree"]["table"]), (2, 1))
    params = dict(m.params, encoder=dict(m.params["encoder"], embeddings=dict(
        emb, position={"tree": {"table": tiled}})))
    model = Pretrained(config, params, vocab=m.vocab, metadata=m.metadata)
    path, export = to_hf.export(model, str(tmp_path / "hf"))
    assert export.config.max_position_embeddings == 128
    hf_ids, ids, mask = _long_inputs(case)
    np.testing.assert_allclose(_hidden(path, _torch(hf_ids, mask, np.zeros_like(ids))),
                               model.encode(ids, mask), atol=TOL, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["yarn", "dynamic_ntk", "llama3"])
def test_modernbert_rope_scaling_is_written_into_rope_parameters(cases, exported, method):
    """HF outputs at 100 tokens (past the original 64) equal posjax's extended model; the
    local layers keep their plain RoPE."""
    case = cases["modernbert-local"]
    path = exported("modernbert-local", method)
    with open(os.path.join(path, "config.json")) as f:
        hf = json.load(f)
    full, local = hf["rope_parameters"]["full_attention"], hf["rope_parameters"]["sliding_attention"]
    assert full["rope_type"] == families.HF_ROPE_TYPES[method] and full["factor"] == 4.0
    assert local == {"rope_type": "default", "rope_theta": 50.0}
    # transformers' dynamic RoPE reads the pretraining length from max_position_embeddings
    assert hf["max_position_embeddings"] == (64 if method == "dynamic_ntk" else 256)
    hf_ids, ids, mask = _long_inputs(case)
    ours = case.model.extend(256, method=method).encode(ids, mask)
    np.testing.assert_allclose(_hidden(path, _torch(hf_ids, mask, None)), ours,
                               atol=TOL, rtol=0)


def test_fixed_ntk_and_linear_rope_parameters():
    """Fixed NTK is plain RoPE with the scaled base; linear needs no pretraining length."""
    params, length = families.rope_parameters(
        {"name": "rope", "base": 500.0, "scaling": "ntk", "factor": 4.0}, 8)
    assert params == {"rope_type": "default", "rope_theta": 500.0 * 4.0 ** (8 / 6)}
    assert length is None
    params, length = families.rope_parameters(
        {"name": "rope", "base": 500.0, "scaling": "linear", "factor": 4.0}, 8)
    assert params == {"rope_type": "linear", "rope_theta": 500.0, "factor": 4.0}
    assert length is None


# -- refusals ---------------------------------------------------------------------------------


def test_cli_refuses_an_unexportable_model_before_writing(cases, tmp_path, capsys):
    """(--to_hf also reads a HF directory, converted in memory: the cheap way to a model
    whose convert.json-equivalent says NEZHA.)"""
    out = tmp_path / "hf"
    code, err = _cli(capsys, "--to_hf", cases["nezha"].hf_dir, "--out", str(out))
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("posjax.convert: error: position.name='nezha' is not allowed: one of "
                          "hierarchical, learned (BERT, RoBERTa) or rope (RoFormer, ModernBERT)")
    assert "transformers 5 has no NEZHA" in err and "train with configs/roformer.py" in err
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("arch, message", [
    ("jinabert", "position.name='alibi' is not allowed: one of hierarchical, learned"),
    ("albert", "model_type (convert.json)='albert' is not allowed: one of bert, roberta, "
               "roformer, modernbert")])
def test_unexportable_families_name_what_is_exportable(cases, tmp_path, arch, message):
    with pytest.raises(ConfigError) as e:
        to_hf.export(cases[arch].model, str(tmp_path / "hf"))
    assert str(e.value).startswith(message), str(e.value)
    assert not os.listdir(tmp_path)


def test_roformer_scaling_is_refused_not_dropped(cases, tmp_path, capsys):
    model = cases["roformer"].model.extend(256, method="yarn")
    with pytest.raises(ConfigError, match=r"^position.scaling='yarn' is not allowed: 'none' "
                                          "for roformer"):
        to_hf.export(model, str(tmp_path / "hf"))
    assert not os.listdir(tmp_path)
    # ... while plain extrapolation (method 'none') exports as a longer RoFormer
    path, export = to_hf.export(cases["roformer"].model.extend(256, method="none"),
                                str(tmp_path / "hf"))
    assert export.config.max_position_embeddings == 256


def test_configs_transformers_cannot_express_name_the_field(cases):
    """The re-import check: fields a family does not have, and scalings it does not take."""
    config = cases["bert"].model.config
    plain = families.plain_config(config)
    hf = families.hf_fields("bert", plain, {})
    families.check_round_trip(plain, hf, "bert")  # the real one passes
    with plain.unlocked():
        plain.model.post_ln = False
    with pytest.raises(ConfigError, match=r"^model.post_ln=False is not allowed: True "):
        families.check_round_trip(plain, hf, "bert")
    t5 = families.plain_config(config)
    t5.position = {"name": "t5"}
    with pytest.raises(ConfigError, match=r"^position.name='t5' is not allowed: one of "
                                          r"hierarchical, learned .*rope"):
        families.family_of(t5, {})
    with pytest.raises(ConfigError, match=r"^position.scaling='longrope' is not allowed: one "
                                          r"of none, ntk, linear, dynamic_ntk, yarn, llama3"):
        families.rope_parameters({"name": "rope", "scaling": "longrope", "factor": 2.0,
                                  "original_length": 64, "short_factor": [1.0] * 4,
                                  "long_factor": [2.0] * 4}, 8)


def test_out_is_replaced_only_with_overwrite(cases, tmp_path, capsys):
    workdir = cases["bert"].hf_dir  # read as --to_hf's source without writing a workdir
    out = tmp_path / "hf"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, err = _cli(capsys, "--to_hf", workdir, "--out", str(out))
    assert code == 2 and "--out=" in err and "--overwrite" in err and len(err.splitlines()) == 1
    assert os.listdir(out) == ["keep.txt"]
    code, err = _cli(capsys, "--to_hf", workdir, "--out", str(out), "--overwrite")
    assert code == 0, err
    assert {"config.json", "model.safetensors", "vocab.txt"} <= set(os.listdir(out))
    assert "keep.txt" not in os.listdir(out) and os.listdir(tmp_path) == ["hf"]
    code, err = _cli(capsys, "--to_hf", workdir, "--out", workdir, "--overwrite")
    assert code == 2 and "other than the --to_hf workdir" in err
    assert "model.safetensors" in os.listdir(workdir)


def test_model_without_mlm_head_exports_the_base_model(cases, tmp_path):
    """A checkpoint converted without an MLM head (has_mlm_head False) exports as BertModel:
    no freshly initialized head is passed off as a trained one."""
    from posjax.pretrained import Pretrained

    case = cases["bert"]
    m = case.model
    headless = Pretrained(m.config, m.params, vocab=m.vocab,
                          metadata=dict(m.metadata, has_mlm_head=False))
    path, export = to_hf.export(headless, str(tmp_path / "hf"))
    assert export.architecture == "BertModel"
    hidden = _hidden(path, _torch(case.ids, case.mask, case.types))
    np.testing.assert_allclose(real(hidden, case.mask), real(case.hidden, case.mask), atol=TOL, rtol=0)


def test_bpe_tokenizer_files_come_from_the_original_checkpoint(tmp_path):
    """No WordPiece vocab.txt (RoBERTa, ModernBERT): the original directory's tokenizer
    files, with model_max_length set to the exported length; a note when there are none."""
    from posjax.convert.to_hf.tokenizer import tokenizer_files

    hf_dir = tmp_path / "orig"
    hf_dir.mkdir()
    (hf_dir / "tokenizer.json").write_text('{"model": {}}')
    (hf_dir / "tokenizer_config.json").write_text('{"model_max_length": 512, "x": 1}')
    files, note = tokenizer_files(None, "wordpiece", None, {"hf_dir": str(hf_dir)}, 2048)
    assert note is None and files["tokenizer.json"] == b'{"model": {}}'
    assert json.loads(files["tokenizer_config.json"]) == {"model_max_length": 2048, "x": 1}
    files, note = tokenizer_files(None, "wordpiece", None, {"hf_dir": str(tmp_path / "gone")}, 64)
    assert files == {} and "no tokenizer files written" in note


def test_a_workdir_not_converted_from_hf_exports_as_the_family_its_layout_reads_as(cases, tmp_path):
    """No convert.json (a model posjax trained): post-LN + learned table reads as BERT; ids
    and vocab.txt stay in posjax order ([PAD] [UNK] [CLS] [SEP] [MASK] first)."""
    from posjax.pretrained import Pretrained

    m = cases["bert"].model
    trained = Pretrained(m.config, m.params, vocab=m.vocab, metadata={})
    path, export = to_hf.export(trained, str(tmp_path / "hf"))
    assert (export.architecture, export.config.pad_token_id) == ("BertForMaskedLM", 0)
    ids, mask = trained.tokenize(["w3 w17 w5", "w80"])
    tok = transformers.AutoTokenizer.from_pretrained(path)
    np.testing.assert_array_equal(tok(["w3 w17 w5", "w80"], padding=True)["input_ids"], ids)
    types = np.zeros_like(ids)
    hidden = _hidden(path, _torch(ids, mask, types))
    np.testing.assert_allclose(real(hidden, mask), real(trained.encode(ids, mask, types), mask),
                               atol=TOL, rtol=0)
