"""The synthetic patch images (posjax.data.patches): seeded and offline, codes as defined,
rows of the batch contract with (row, column) or raster positions, resumable training order,
held-out rows at any square grid, and every bad field named."""

import numpy as np
import pytest

from configs import rope2d, tiny
from posjax.data import make_train_iterator, patches, tokenizers
from posjax.data import get_iterator_state, set_iterator_state
from posjax.errors import ConfigError
from posjax.config.validation import validate


def _config(**patch_fields):
    config = rope2d.get_config("tiny")
    for k, v in patch_fields.items():
        config.data.patches[k] = v
    return config


def test_codes_read_each_patch_row_major_in_base_levels():
    img = np.array([[0.9, 0.1, 0.0, 0.0],
                    [0.1, 0.6, 0.0, 0.0],
                    [0.0, 0.0, 0.7, 0.7],
                    [0.0, 0.0, 0.7, 0.7]])
    # patch 2, levels 2: pixels above 0.5 are 1; code = sum level_i * 2**i, i row-major
    np.testing.assert_array_equal(patches.codes(img, 2, 2), [1 + 8, 0, 0, 15])
    # levels 3: 0.9 -> 2, 0.6 -> 1, 0.7 -> 2
    np.testing.assert_array_equal(patches.codes(img, 2, 3), [2 + 27, 0, 0, 2 * (1 + 3 + 9 + 27)])
    s = patches.settings(_config())
    assert patches.code_names(s)[9] == "patch:1001" and len(patches.code_names(s)) == 16


def test_images_are_seeded_and_offline():
    s = patches.settings(_config())
    a = [patches.image_codes(s, patches.TRAIN, 8, i) for i in range(20)]
    again = [patches.image_codes(s, patches.TRAIN, 8, i) for i in range(20)]
    other = [patches.image_codes(dict(s, seed=1), patches.TRAIN, 8, i) for i in range(20)]
    held = [patches.image_codes(s, patches.HELDOUT, 8, i) for i in range(20)]
    assert all(np.array_equal(x, y) for x, y in zip(a, again))
    assert not all(np.array_equal(x, y) for x, y in zip(a, other))
    assert not any(np.array_equal(x, y) for x, y in zip(a, held))
    codes = np.concatenate(a)
    assert codes.min() >= 0 and codes.max() < 16 and len(np.unique(codes)) > 8


def test_rows_carry_grid_positions_for_2d_schemes_and_raster_for_1d():
    config = _config()
    tok = tokenizers.build(config)
    assert tok.vocab_size == 21
    row = patches.make_row(config, tok, patches.TRAIN, 4, 0, np.random.default_rng(0))
    assert row["positions"].shape == (16, 2)
    np.testing.assert_array_equal(row["positions"][5], [1, 1])
    assert row["mlm_weights"].sum() == round(16 * 0.3)  # data.mask_rate of configs/rope2d.py
    config.position = {"name": "rope"}
    row = patches.make_row(config, tok, patches.TRAIN, 4, 0, np.random.default_rng(0))
    np.testing.assert_array_equal(row["positions"], np.arange(16))


def test_training_order_resumes_exactly():
    config = _config(images=10)
    tok = tokenizers.build(config)
    it = make_train_iterator(config, tok, seed=3)
    for _ in range(3):  # past the end of the first epoch (10 images, batch 4)
        next(it)
    state = get_iterator_state(it)
    want = next(it)
    again = make_train_iterator(config, tok, seed=3)
    set_iterator_state(again, state)
    got = next(again)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])
    assert want["positions"].shape == (4, 16, 2)


def test_eval_rows_at_a_larger_grid():
    config = _config()
    tok = tokenizers.build(config)
    rows = patches.eval_rows(config, tok, 64, masked_tokens=50, seed=0)
    arrays = rows.arrays
    assert arrays["input_ids"].shape == (3, 64) and arrays["positions"].shape == (3, 64, 2)
    assert arrays["positions"][:, :, 0].max() == 7  # an 8 x 8 grid
    assert arrays["mlm_weights"].sum() >= 50 and rows.crossing == 0
    np.testing.assert_array_equal(rows.cluster, [0, 1, 2])


@pytest.mark.parametrize("change,field", [
    (dict(seq_len=15), "data.seq_len"),
    (dict(tokenizer="chinese_chars"), "data.tokenizer"),
    (dict(vocab_size=30), "data.vocab_size"),
    (dict(patches={"patch": 4, "levels": 3}), "data.patches.levels"),
    (dict(patches={"size": 3}), "data.patches.size"),
    (dict(patches={"positions": "raster"}), "data.patches.positions"),  # rope2d needs grid
])
def test_bad_fields_are_named(change, field):
    config = _config()
    for k, v in change.items():
        if k == "patches":
            config.data.patches = v
        else:
            config.data[k] = v
    with pytest.raises(ConfigError) as e:
        validate(config)
    assert e.value.field == field, str(e.value)


def test_2d_scheme_on_text_and_1d_scheme_given_grid_positions():
    text = tiny.get_config("rope")
    text.position = {"name": "rope2d"}  # a 2-D scheme given the 1-D positions of text
    with pytest.raises(ConfigError, match="data.corpus.*'patches' for the 2-D position"):
        validate(text)
    config = _config(positions="grid")
    config.position = {"name": "rope"}  # a 1-D scheme given (row, column) positions
    with pytest.raises(ConfigError, match="data.patches.positions.*'rope' takes 1-D"):
        validate(config)


def test_eval_corpus_override_must_keep_the_run_kind():
    """eval.py --corpus cannot feed an image run text, or a text run images (checked before
    anything is trained or written; eval.py turns the ConfigError into one line, exit 2)."""
    from posjax.evaluation.driver import check_corpus

    image, text = _config(), tiny.get_config("rope")
    check_corpus("img", image, None)
    check_corpus("img", image, "patches")
    check_corpus("txt", text, "kjv")
    with pytest.raises(ConfigError, match="corpus='peoples_daily'.*img: it reads image"):
        check_corpus("img", image, "peoples_daily")
    with pytest.raises(ConfigError, match="corpus='patches'.*txt: it reads text"):
        check_corpus("txt", text, "patches")
