import os
import stat

import pytest

from engine.fileio import atomic_write, atomic_write_text


def test_atomic_write_replaces_whole_files_with_normal_permissions(tmp_path):
    path = tmp_path / "sub" / "model.bin"
    atomic_write_text(path, "first")
    assert path.read_text() == "first"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask  # as open() would create it, not 0600
    atomic_write_text(path, "second")
    assert path.read_text() == "second"
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.bin"]  # no temp files left


def test_a_failed_write_leaves_the_old_file_and_no_debris(tmp_path):
    path = tmp_path / "metrics.png"
    atomic_write_text(path, "good")
    with pytest.raises(RuntimeError), atomic_write(path, "w") as f:
        f.write("half")
        raise RuntimeError("disk full")
    assert path.read_text() == "good"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.png"]
