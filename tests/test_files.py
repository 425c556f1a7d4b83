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
