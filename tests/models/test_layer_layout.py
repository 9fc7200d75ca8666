"""posjax.models.layout.plan: local/global and NoPE patterns, and bad layouts."""

import pytest

from posjax.errors import ConfigError
from posjax.models.layout import plan


def test_modernbert_pattern_global_every_third_from_layer_0():
    kinds = plan(7, 512, window=128, global_every=3)
    assert [k.window for k in kinds] == [None, 128, 128, None, 128, 128, None]
    assert all(k.positions for k in kinds)


def test_global_last_in_group_and_nope_every_fourth():
    kinds = plan(8, 256, window=64, global_every=4, global_first=False, nope_every=4)
    assert [k.local for k in kinds] == [True, True, True, False] * 2
    assert [k.positions for k in kinds] == [True, True, True, False] * 2


def test_no_window_is_all_global():
    assert all(not k.local for k in plan(3, 64))


@pytest.mark.parametrize("kwargs,field", [
    (dict(window=0), "model.local_window"),
    (dict(window=-8), "model.local_window"),
    (dict(window=65), "model.local_window"),  # wider than the training length 64
    (dict(window=True), "model.local_window"),
    (dict(window=16, global_every=0), "model.global_every"),
    (dict(window=16, global_every=5, global_first=False), "model.global_every"),  # 4 layers
    (dict(window=16, nope_every=0), "model.nope_every"),
])
def test_bad_layouts_name_their_field(kwargs, field):
    with pytest.raises(ConfigError) as e:
        plan(4, 64, **kwargs)
    assert e.value.field == field and "\n" not in str(e.value)
