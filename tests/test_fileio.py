import os
import stat

import pytest

from engine.errors import UserError
from engine.fileio import atomic_write, atomic_write_text, check_output_dir, check_output_file


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


def test_output_checks_name_the_problem_and_create_nothing(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    cases = [
        (check_output_file, tmp_path / "adir", "-o", "-o .*adir: is a directory; give a file name"),
        (check_output_file, tmp_path / "afile" / "x.hcpe", "-o", "afile is a file, not a directory"),
        (check_output_file, tmp_path / "afile" / "deeper" / "x.hcpe", "", "afile is a file"),
        (check_output_dir, tmp_path / "afile", "--out", "--out .*afile: is a file, not a directory"),
        (check_output_dir, tmp_path / "afile" / "run", "", "cannot be created: .*afile is a file"),
    ]
    for check, path, option, message in cases:
        with pytest.raises(UserError, match=message):
            check(path, option)
    assert check_output_file(tmp_path / "new" / "sub" / "x.hcpe") == tmp_path / "new" / "sub" / "x.hcpe"
    assert check_output_dir(tmp_path / "new" / "run") == tmp_path / "new" / "run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]  # no folders, no probe files


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_output_checks_catch_places_nobody_can_write(tmp_path):
    with pytest.raises(UserError, match="cannot write in /proc"):
        check_output_file("/proc/self/x.onnx")  # not writable even for root, unlike a chmod'ed folder


def test_atomic_write_to_an_impossible_place_is_a_user_error(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match="afile is a file"), atomic_write(tmp_path / "afile" / "x.bin"):
        pass
    with pytest.raises(UserError, match="is a directory"), atomic_write(tmp_path):
        pass


def test_a_failed_write_removes_the_folders_it_made(tmp_path):
    with pytest.raises(RuntimeError), atomic_write(tmp_path / "new" / "sub" / "x.bin") as f:
        f.write(b"half")
        raise RuntimeError("no games passed the filters")
    assert list(tmp_path.iterdir()) == []
