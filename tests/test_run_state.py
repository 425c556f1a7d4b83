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


def test_rng_state_round_trip_repeats_every_draw():
    """What a resumed run needs: after set_rng_state, every generator draws what it drew after rng_state."""
    import random

    import numpy as np

    from minigpt.run_state import rng_state, set_rng_state

    data_gen = torch.Generator().manual_seed(1)
    saved = rng_state(data_gen)

    def draws() -> tuple:
        return (torch.rand(3), np.random.rand(3), random.random(), torch.randint(0, 100, (3,), generator=data_gen))

    first = draws()
    set_rng_state(saved, data_gen)
    again = draws()
    assert torch.equal(first[0], again[0]) and np.array_equal(first[1], again[1])
    assert first[2] == again[2] and torch.equal(first[3], again[3])


def test_a_new_run_never_overwrites_a_saved_one(tmp_path):
    from minigpt.run_state import RunFolder

    run = RunFolder(tmp_path)
    run.check_fresh()  # empty folder: fine
    save_checkpoint({"step": 1}, run.checkpoint)
    with pytest.raises(FileExistsError, match="--resume"):
        run.check_fresh()
