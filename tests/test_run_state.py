import pytest
import torch

from minigpt.run_state import CheckpointError, load_checkpoint, save_checkpoint


def test_round_trip(tmp_path):
    path = save_checkpoint({"step": 3, "w": torch.arange(4.0)}, tmp_path / "ck.pt")
    state = load_checkpoint(path)
    assert state["step"] == 3 and torch.equal(state["w"], torch.arange(4.0))


def test_crash_mid_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = save_checkpoint({"step": 1}, tmp_path / "ck.pt")

    def torch_save_that_dies(obj, f):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt  # the process is killed in the middle of writing

    monkeypatch.setattr(torch, "save", torch_save_that_dies)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint({"step": 2}, path)
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1  # the old checkpoint is intact
    assert [p.name for p in tmp_path.iterdir()] == ["ck.pt"]  # and no temp file is left behind


def test_truncated_file_is_a_clear_error(tmp_path):
    path = save_checkpoint({"step": 1, "w": torch.zeros(1000)}, tmp_path / "ck.pt")
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(CheckpointError, match="truncated, corrupt"):
        load_checkpoint(path)


def test_foreign_files_are_clear_errors(tmp_path):
    torch.save({"model": {}}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a minigpt checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointError, match="truncated, corrupt or not a minigpt checkpoint"):
        load_checkpoint(tmp_path / "notes.txt")
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")
