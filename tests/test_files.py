import pytest

from minigpt.files import write_atomically


def test_writes_the_bytes_and_creates_the_folder(tmp_path):
    path = write_atomically(tmp_path / "new" / "cache.bin", lambda f: f.write(b"\x00\x01tokens"))
    assert path.read_bytes() == b"\x00\x01tokens"
    assert [p.name for p in path.parent.iterdir()] == ["cache.bin"]  # no temp file left next to it


def test_a_write_that_fails_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = write_atomically(tmp_path / "meta.json", lambda f: f.write(b'{"old": 1}'))

    def dies_halfway(f):
        f.write(b'{"new": ')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, dies_halfway)
    assert path.read_bytes() == b'{"old": 1}'  # a reader never sees the half-written version
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def test_a_full_disk_names_the_folder_and_the_space_needed(tmp_path, monkeypatch):
    """torch.save on a full disk raises "[enforce fail at inline_container.cc] . unexpected pos ...": the save says
    instead which disk is full, how much the file needs and how much is free, and the old file stays."""
    import shutil
    from collections import namedtuple

    from minigpt.files import DiskFull

    target = tmp_path / "checkpoint.pt"
    target.write_bytes(b"old")

    def short_write(f):
        f.write(b"x" * 1000)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1000 vs 998")

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10 * 2**20, 10 * 2**20 - 512, 512))
    with pytest.raises(DiskFull) as info:
        write_atomically(target, short_write, size_hint=3 * 2**20)
    message = str(info.value)
    assert f"the disk holding {tmp_path} is full" in message and "needs about 3.0 MiB" in message
    assert "0.0 MiB are free" in message and "enforce" not in message
    assert target.read_bytes() == b"old" and list(tmp_path.iterdir()) == [target]


def test_a_full_disk_during_a_training_save_is_one_line_and_keeps_the_checkpoint(tmp_path, monkeypatch, capsys):
    import torch

    from minigpt.cli import main

    common = ["train", "--preset", "tiny", "--batch", "2", "--ctx", "16", "--out", str(tmp_path / "run")]
    assert main([*common, "--steps", "1"]) == 0
    saved = (tmp_path / "run" / "checkpoint.pt").read_bytes()

    def full(obj, f, *args, **kwargs):  # what torch.save raises when the disk fills under it
        f.write(b"x" * 100)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 100 vs 64")

    monkeypatch.setattr(torch, "save", full)
    capsys.readouterr()
    assert main([*common, "--steps", "2", "--resume"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("minigpt train: error: could not save") and "\n" not in err and "enforce" not in err
    assert f"the disk holding {tmp_path / 'run'} is full" in err and "needs about" in err
    assert (tmp_path / "run" / "checkpoint.pt").read_bytes() == saved
