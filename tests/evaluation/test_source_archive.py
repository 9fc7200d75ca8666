"""source_archive: a study's source params kept beside its results rebuild the same weights."""

from __future__ import annotations

import os
import shutil

import pytest

from posjax.errors import ConfigError
from posjax.evaluation.run import restore, source_archive
from posjax.training import checkpoints

pytestmark = pytest.mark.slow  # the tiny trained workdir (session fixture)


def test_an_archived_source_restores_to_the_same_weights_at_its_step(trained_workdir, tmp_path):
    source = restore.open_run(trained_workdir)
    path = str(tmp_path / "source" / "head.safetensors")
    digest = source_archive.export(trained_workdir, path)
    assert digest == restore.weights_digest(source)
    params, step, recorded = source_archive.read(path)
    assert (step, recorded) == (source.step, digest)
    # another machine: the same workdir files (config, vocab) but no checkpoint
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    for name in os.listdir(trained_workdir):
        if os.path.isfile(os.path.join(trained_workdir, name)):
            shutil.copy(os.path.join(trained_workdir, name), fresh / name)
    assert checkpoints.latest_step(str(fresh)) is None
    assert source_archive.restore_into(str(fresh), path) == source.step
    again = restore.open_run(str(fresh))
    assert again.step == source.step and restore.weights_digest(again) == digest
    # exported once: a second export keeps the file
    mtime = os.path.getmtime(path)
    assert source_archive.export(trained_workdir, path) == digest
    assert os.path.getmtime(path) == mtime


def test_a_file_without_the_archive_metadata_is_refused(tmp_path):
    import numpy as np
    import safetensors.numpy

    path = str(tmp_path / "plain.safetensors")
    safetensors.numpy.save_file({"w": np.zeros(2, np.float32)}, path)
    with pytest.raises(ConfigError, match="source archive"):
        source_archive.read(path)
