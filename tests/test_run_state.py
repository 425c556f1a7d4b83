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


def test_a_new_run_refuses_a_folder_with_only_a_log(tmp_path):
    """A run killed before its first save leaves only log.jsonl: a new run must not wipe it either."""
    from minigpt.run_state import RunFolder

    run = RunFolder(tmp_path)
    run.log.write_text('{"step": 1}\n')
    with pytest.raises(FileExistsError, match=r"already holds a run \(log.jsonl\); it saved no checkpoint.*--restart"):
        run.check_fresh()


def test_out_must_be_a_usable_folder(tmp_path, monkeypatch):
    from minigpt.run_state import RunFolder

    (tmp_path / "a_file").write_text("not a folder")
    with pytest.raises(NotADirectoryError, match="is not a folder"):
        RunFolder(tmp_path / "a_file").check_usable()
    with pytest.raises(NotADirectoryError, match="its parent .*a_file is a file"):
        RunFolder(tmp_path / "a_file" / "run").check_usable()
    RunFolder(tmp_path / "new" / "run").check_usable()  # not there yet: fine, it will be made
    # Unreadable: simulated, since this may run as root (which reads everything).
    monkeypatch.setattr("minigpt.run_state.os.access", lambda path, mode: False)
    with pytest.raises(PermissionError, match="cannot read and write the run folder"):
        RunFolder(tmp_path).check_usable()


def test_unreadable_checkpoint_is_not_called_corrupt(tmp_path, monkeypatch):
    import minigpt.run_state as run_state

    path = save_checkpoint({"step": 1}, tmp_path / "ck.pt")

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(run_state, "open", denied, raising=False)  # what open() does on a file we may not read
    with pytest.raises(CheckpointError, match=r"cannot read .*ck.pt \(Permission denied\); check its permissions"):
        load_checkpoint(path)


def test_newer_and_older_format_versions_are_named(tmp_path):
    from minigpt.run_state import FORMAT, VERSION

    torch.save({"format": FORMAT, "version": VERSION + 1}, tmp_path / "new.pt")
    with pytest.raises(CheckpointError, match=f"version {VERSION + 1}, newer than this minigpt reads.*upgrade"):
        load_checkpoint(tmp_path / "new.pt")
    torch.save({"format": FORMAT, "version": VERSION - 1}, tmp_path / "old.pt")
    with pytest.raises(CheckpointError, match=f"version {VERSION - 1}; this minigpt reads only {VERSION}"):
        load_checkpoint(tmp_path / "old.pt")


def test_a_flipped_bit_in_the_weights_is_caught_by_the_checksums(tmp_path):
    """torch.load does not check the zip's CRC-32s: without load_checkpoint's check this loads wrong weights."""
    path = save_checkpoint({"step": 1, "w": torch.arange(10_000.0)}, tmp_path / "ck.pt")
    raw = bytearray(path.read_bytes())
    start = raw.index(torch.arange(10_000.0).numpy().tobytes()[:64])  # where the tensor's bytes are stored
    raw[start + 1000] ^= 0x10
    path.write_bytes(bytes(raw))
    assert not torch.equal(torch.load(path, weights_only=True)["w"], torch.arange(10_000.0))  # silently wrong
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        load_checkpoint(path)


def test_first_line_cuts_at_a_word_boundary():
    from minigpt.run_state import first_line

    assert first_line("short message\nsecond line") == "short message"
    assert first_line("alpha beta gamma delta", limit=13) == "alpha beta ..."
    long = "PytorchStreamReader failed reading zip archive: failed finding central directory " * 3
    cut = first_line(long, 100)
    assert cut.endswith(" ...") and len(cut) <= 104
    assert long.startswith(cut.removesuffix(" ...") + " ")  # ends where a word ends: the next character is a space


def test_truncated_checkpoint_message_has_no_cut_words(tmp_path):
    path = save_checkpoint({"step": 1, "w": torch.zeros(1000)}, tmp_path / "ck.pt")
    for keep in (0, 10, 300, 2000):
        path.write_bytes(save_checkpoint({"step": 1, "w": torch.zeros(1000)}, tmp_path / "full.pt").read_bytes()[:keep])
        with pytest.raises(CheckpointError) as info:
            load_checkpoint(path)
        message = str(info.value)
        inner = message[message.index("(") + 1 : message.rindex(")")]  # the internal reason, shortened
        assert "\n" not in message and message.endswith("point --out elsewhere")
        assert len(inner) < 160 and (inner.endswith(" ...") or not inner.endswith(("-", "'")))


def test_full_disk_while_saving_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    import errno

    from minigpt.model import get_config
    from minigpt.run_state import RunFolder
    from minigpt.train import TrainConfig, TrainResult, build_step_state, checkpoint_snapshot

    cfg = TrainConfig(preset="tiny", ctx=16, steps=4, out=str(tmp_path), verbose=False)
    state = build_step_state(get_config("tiny"), cfg, torch.device("cpu"))
    result = TrainResult(cfg, state.model, history=[{"step": 1}])
    run, data_gen = RunFolder(tmp_path), torch.Generator().manual_seed(0)
    run.save(checkpoint_snapshot(cfg, state, result, data_gen))
    before = run.checkpoint.read_bytes()

    def disk_full(obj, f):
        f.write(b"x" * 1000)  # part of the file made it before the disk filled up
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    result.history.append({"step": 2})
    full = r"could not save .* at step 2 \(the disk holding .* is full: .*\); the step-1"
    with pytest.raises(CheckpointError, match=full):
        run.save(checkpoint_snapshot(cfg, state, result, data_gen))
    monkeypatch.undo()
    assert run.checkpoint.read_bytes() == before  # the old checkpoint, byte for byte
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]  # and no temp file


def test_resume_mismatches_name_each_setting_and_both_values():
    from minigpt.run_state import resume_mismatches

    saved = {"preset": "10m", "precision": "fp32", "master_weights": False, "ctx": 256, "tokenizer": "minigpt-8k"}
    now = {**saved, "preset": "tiny", "ctx": 64, "steps": 500}
    assert resume_mismatches(saved, now) == ["--preset: saved 10m, given tiny", "--ctx: saved 256, given 64"]
    assert resume_mismatches(saved, {**saved, "lr": 1.0}) == []  # lr, steps, batch... may change on resume


def test_stop_signals_turn_the_first_signal_into_a_flag_and_put_handlers_back():
    import os
    import signal

    from minigpt.run_state import StopSignals

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)  # delivered to this (main) thread before os.kill returns to us
        assert stop.received == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):  # a second signal: the user insists
            os.kill(os.getpid(), signal.SIGINT)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    with pytest.raises(RuntimeError), StopSignals():  # put back on an error too
        raise RuntimeError
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_stop_signals_do_nothing_outside_the_main_thread():
    import signal
    import threading

    from minigpt.run_state import StopSignals

    seen = []
    # whatever this process had (Python's default_int_handler, or SIG_IGN when started as a background job)
    before = signal.getsignal(signal.SIGINT)

    def in_a_thread() -> None:
        with StopSignals() as stop:  # signal.signal would raise ValueError here
            seen.append((stop.received, signal.getsignal(signal.SIGINT)))

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert seen == [(None, before)]  # no handler installed from a thread


def test_a_locked_folder_refuses_a_second_run_and_cleans_up(tmp_path):
    import os

    from minigpt.run_state import RunFolder, RunFolderBusy

    (tmp_path / "checkpoint.pt.abc123.tmp").write_bytes(b"left by a kill -9")
    run = RunFolder(tmp_path)
    with run.locked():
        assert not list(tmp_path.glob("*.tmp"))  # a killed save's temp file, removed once the lock is ours
        with (
            pytest.raises(RunFolderBusy, match=f"in use by another run \\(pid {os.getpid()}\\)"),
            RunFolder(tmp_path).locked(),
        ):
            pass  # flock: a second open file description conflicts, even in the same process
    assert not run.lock_path.exists()  # nothing left behind
    with RunFolder(tmp_path).locked():  # and free again
        pass


def test_resuming_on_fewer_gpus_puts_back_the_states_of_the_gpus_there(monkeypatch):
    """A run saved on 2 GPUs and resumed on 1: torch would fail on the missing GPU's state; only GPU 0's is set."""
    from minigpt.run_state import rng_state, set_rng_state

    data_gen = torch.Generator().manual_seed(0)
    state = rng_state(data_gen)
    state["cuda"] = [torch.zeros(16, dtype=torch.uint8), torch.ones(16, dtype=torch.uint8)]
    put_back = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", put_back.extend)
    set_rng_state(state, data_gen)
    assert len(put_back) == 1 and torch.equal(put_back[0], state["cuda"][0])
