"""Training hardening (issue 32): flat memory under accumulation, resume that does what it says, run folders
that never get stuck, a planner that does not hang, one meaning for --ctx, and the smaller cases."""

from __future__ import annotations

import gc
import json

import pytest
import torch
import torch.nn as nn

from minigpt.model import GPT, ModelConfig
from minigpt.step import WindowBatches, forward_backward, window_micro_batches
from minigpt.train import TrainConfig

CPU = torch.device("cpu")
SMALL = ModelConfig(n_layer=1, n_head=2, n_embd=32, ctx=16, vocab_size=256)  # markov_data's 256 token ids


# ----------------------------------------------------------------------------------------------------------
# 1. Memory does not grow with --accum


def live_tensors() -> int:
    """How many torch.Tensor objects are alive now (type() rather than isinstance: no deprecation warnings)."""
    return sum(issubclass(type(o), torch.Tensor) for o in gc.get_objects())


class CountingModel(nn.Module):
    """The GPT, counting the live tensors at the start of the last micro-batch's forward (counting is slow)."""

    def __init__(self, model: GPT, accum: int) -> None:
        super().__init__()
        self.model, self.accum, self.calls, self.at_last = model, accum, 0, None

    def forward(self, x, y, reduction="mean"):
        self.calls += 1
        if self.calls == self.accum:
            self.at_last = live_tensors()
        return self.model(x, y, reduction=reduction)


def tensors_held_during_window(data, accum: int, materialize: bool = False) -> int:
    """Live tensors at the last micro-batch of a window of `accum` micro-batches, beyond those before the window."""
    cfg = TrainConfig(preset="tiny", batch=2, ctx=16, accum=accum, steps=1)
    model = CountingModel(GPT(SMALL, seed=0), accum)
    gc.collect()
    before = live_tensors()
    window = window_micro_batches(data, cfg, torch.Generator().manual_seed(0))
    if materialize:  # the old way: the whole window's tensors drawn before the first forward
        window = list(window)
    forward_backward(model, window, CPU, "fp32")
    return model.at_last - before


def test_a_window_holds_the_same_number_of_tensors_whatever_accum(markov_data):
    """Accumulation keeps memory constant: at its last micro-batch the step holds as many tensors with accum 24 as
    with accum 4 (a list of per-micro-batch losses, or a window drawn whole, would add tensors per micro-batch)."""
    held = {accum: tensors_held_during_window(markov_data, accum) for accum in (4, 24)}
    assert held[24] == held[4], held
    # The check can fail: the whole window drawn up front holds 2 tensors (x, y) per micro-batch.
    drawn_whole = tensors_held_during_window(markov_data, 24, materialize=True)
    assert drawn_whole >= held[24] + 2 * 20, (drawn_whole, held)


def test_lazy_windows_draw_the_same_sequences_in_the_same_order(markov_data):
    """The micro-batches built one at a time are the very sequences one draw of the whole window gives, per
    process too, and leave the generator where that draw leaves it (a resumed run draws the same batches)."""
    cfg = TrainConfig(preset="tiny", batch=3, ctx=16, accum=5, steps=1)
    gen_whole = torch.Generator().manual_seed(7)
    x, y = markov_data.get_batch("train", 3 * 5 * 2, 16, gen_whole)
    for rank in (0, 1):
        gen = torch.Generator().manual_seed(7)
        window = window_micro_batches(markov_data, cfg, gen, rank, 2)
        assert isinstance(window, WindowBatches) and len(window) == 5
        got_x = torch.cat([xm for xm, _ in window])
        got_y = torch.cat([ym for _, ym in window])
        assert torch.equal(got_x, x[rank * 15 : (rank + 1) * 15]) and torch.equal(got_y, y[rank * 15 : (rank + 1) * 15])
        assert torch.equal(gen.get_state(), gen_whole.get_state())
    with pytest.raises(IndexError):
        window[5]


def test_the_window_loss_is_the_mean_over_every_target(markov_data):
    """The running sum gives the window's mean loss per token, as the mean over the whole batch at once."""
    cfg = TrainConfig(preset="tiny", batch=2, ctx=16, accum=6, steps=1)
    model = GPT(SMALL, seed=0)
    window = window_micro_batches(markov_data, cfg, torch.Generator().manual_seed(3))
    loss = forward_backward(model, window, CPU, "fp32")
    x = torch.cat([xm for xm, _ in window])
    y = torch.cat([ym for _, ym in window])
    with torch.no_grad():
        _, whole = model(x, y)
    torch.testing.assert_close(loss, whole, rtol=1e-6, atol=0)


def json_out(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------------------
# 2. A resume does what it says: a new --lr and more --steps re-plan the schedule from the saved step


def lrs_used(monkeypatch) -> list[float]:
    """The lr each optimizer step actually hands AdamW, read from its param group just before it steps."""
    from minigpt import step as step_module

    used, real = [], step_module.optimizer_step

    def recording(state, grad_clip):
        used.append(state.optimizer.param_groups[0]["lr"])
        return real(state, grad_clip)

    monkeypatch.setattr(step_module, "optimizer_step", recording)
    return used


RUN = dict(preset="tiny", batch=2, ctx=16, sample_tokens=0, verbose=False)


def test_resume_with_a_new_lr_and_more_steps_uses_logs_and_reports_the_new_schedule(
    markov_data, tmp_path, monkeypatch, capsys
):
    """--resume --lr 0.05 --steps 10 on a run saved at step 3 of 6 (lr 1e-3): every resumed step uses, logs and
    reports the lr a run started with lr 0.05 and 10 steps uses at that step; the JSON config says the same."""
    from minigpt.train import lr_at, train

    out = str(tmp_path / "run")
    train(TrainConfig(out=out, steps=6, lr=1e-3, **RUN), data=markov_data, on_step=lambda r: r["step"] == 3)
    used = lrs_used(monkeypatch)
    new = TrainConfig(out=out, steps=10, lr=0.05, resume=True, **{**RUN, "verbose": True})
    resumed = train(new, data=markov_data)
    want = [0.05 * lr_at(s, new) for s in range(3, 10)]
    assert used == pytest.approx(want, rel=1e-12)  # used ...
    assert [r["lr"] for r in resumed.history[3:]] == pytest.approx(want, rel=1e-12)  # ... logged ...
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["lr"] for r in log[3:]] == pytest.approx(want, rel=1e-12)
    assert resumed.summary()["config"]["lr"] == 0.05 and resumed.summary()["config"]["steps"] == 10  # ... reported
    said = capsys.readouterr().out
    assert f"changed on resume: --steps 6 -> 10, --lr 0.001 -> 0.05; step 4 uses lr {want[0]:.3g}" in said


def test_more_steps_on_resume_follow_the_longer_runs_schedule(markov_data, tmp_path, monkeypatch):
    """A run of 6 steps resumed to 12 uses, from step 4 on, exactly the lrs of a run planned for 12 steps."""
    from minigpt.train import train

    out = str(tmp_path / "run")
    train(TrainConfig(out=out, steps=6, **RUN), data=markov_data, on_step=lambda r: r["step"] == 3)
    straight = train(TrainConfig(steps=12, **RUN), data=markov_data)
    used = lrs_used(monkeypatch)
    resumed = train(TrainConfig(out=out, steps=12, resume=True, **RUN), data=markov_data)
    assert used == [r["lr"] for r in straight.history[3:]] == [r["lr"] for r in resumed.history[3:]]


def test_resume_refuses_adamw_settings_its_saved_state_would_override(markov_data, tmp_path):
    """weight_decay and betas live in AdamW's saved state: a resume that changes them is refused, not ignored."""
    from minigpt.train import train

    out = str(tmp_path / "run")
    train(TrainConfig(out=out, steps=1, **RUN), data=markov_data)
    with pytest.raises(ValueError, match="--weight-decay: saved 0.1, given 0.0"):
        train(TrainConfig(out=out, steps=2, resume=True, weight_decay=0.0, **RUN), data=markov_data)
    with pytest.raises(ValueError, match="--betas"):
        train(TrainConfig(out=out, steps=2, resume=True, betas=(0.9, 0.99), **RUN), data=markov_data)
    train(TrainConfig(out=out, steps=2, resume=True, **RUN), data=markov_data)  # the same betas: no mismatch


# ----------------------------------------------------------------------------------------------------------
# 4. No stuck run folders: every message names a way out that works, and --restart moves a run aside


TINY = ["train", "--preset", "tiny", "--batch", "2", "--ctx", "16", "--device", "cpu"]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    from minigpt.cli import main

    capsys.readouterr()
    code = main([*TINY, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_run_that_diverged_before_its_first_save_can_be_restarted(tmp_path, capsys):
    """--lr 1e30 leaves log.jsonl and no checkpoint: a new run and --resume both point at --restart, which works
    and keeps the old log."""
    run = tmp_path / "run"
    code, _, err = run_cli(capsys, "--steps", "20", "--lr", "1e30", "--out", str(run))
    assert code == 1 and "diverged" in err and "--restart" in err
    assert (run / "log.jsonl").exists() and not (run / "checkpoint.pt").exists()
    old_log = (run / "log.jsonl").read_bytes()
    code, _, err = run_cli(capsys, "--steps", "1", "--out", str(run))
    assert code == 2 and "it saved no checkpoint" in err and "--restart" in err and "pass --resume" not in err
    code, _, err = run_cli(capsys, "--steps", "1", "--out", str(run), "--resume")
    assert code == 1 and "before its first save" in err and "pass --restart instead of --resume" in err
    code, _, err = run_cli(capsys, "--steps", "1", "--out", str(run), "--restart")
    assert code == 0 and f"moved the run in {run} to {tmp_path / 'run.old-1'} (nothing deleted)" in err
    assert (tmp_path / "run.old-1" / "log.jsonl").read_bytes() == old_log
    assert (run / "checkpoint.pt").exists() and len((run / "log.jsonl").read_text().splitlines()) == 1


def test_restart_moves_a_saved_run_aside_each_time_and_never_deletes(tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "--steps", "1", "--out", str(run))[0] == 0
    (run / "notes.txt").write_text("mine")  # not the run's: stays where it is
    first = (run / "checkpoint.pt").read_bytes()
    assert run_cli(capsys, "--steps", "1", "--out", str(run), "--restart", "--seed", "1")[0] == 0
    assert run_cli(capsys, "--steps", "1", "--out", str(run), "--restart", "--seed", "2")[0] == 0
    assert (tmp_path / "run.old-1" / "checkpoint.pt").read_bytes() == first
    assert sorted(p.name for p in (tmp_path / "run.old-2").iterdir()) == ["checkpoint.pt", "log.jsonl"]
    assert (run / "notes.txt").read_text() == "mine" and (run / "checkpoint.pt").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--corpus", "/nonexistent/corpus.txt"], "corpus file not found"),
        (["--init-from", "{run}", "--lora-rank", "2"], "is the run --restart would move aside"),
        (["--init-from", "{missing}", "--lora-rank", "2"], "does not exist"),
    ],
)
def test_restart_checks_every_other_setting_before_it_moves_the_run(tmp_path, capsys, flags, message):
    """A --restart that cannot train leaves the saved run where it was: nothing moves before all else is checked."""
    run = tmp_path / "run"
    assert run_cli(capsys, "--steps", "1", "--out", str(run))[0] == 0
    saved = (run / "checkpoint.pt").read_bytes()
    flags = [f.format(run=run, missing=tmp_path / "missing") for f in flags]
    code, _, err = run_cli(capsys, "--steps", "1", "--out", str(run), "--restart", *flags)
    assert code in (1, 2) and message in err and len(err.strip().splitlines()) == 1, err
    assert (run / "checkpoint.pt").read_bytes() == saved and not (tmp_path / "run.old-1").exists()


def test_a_corrupt_checkpoint_points_at_restart_and_restart_works(tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(capsys, "--steps", "1", "--out", str(run))[0] == 0
    (run / "checkpoint.pt").write_bytes((run / "checkpoint.pt").read_bytes()[:3000])
    code, _, err = run_cli(capsys, "--steps", "2", "--out", str(run), "--resume")
    assert code == 1 and "pass --restart to move the run aside" in err and "delete it" not in err
    assert run_cli(capsys, "--steps", "1", "--out", str(run), "--restart")[0] == 0


def test_a_failed_resume_creates_no_folder(tmp_path, capsys):
    missing = tmp_path / "nope" / "run"
    code, _, err = run_cli(capsys, "--steps", "1", "--out", str(missing), "--resume")
    assert code == 1 and "there is no folder" in err and not (tmp_path / "nope").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--restart", "--resume", "--out", "x"], "--restart moves the run in --out aside"),
        (["--restart"], "--restart moves the run in --out aside"),
        (["--out", ""], "--out is empty"),
        (["--out", "  "], "--out is empty"),
    ],
)
def test_restart_and_out_misuse_is_one_line(flags, message, capsys):
    code, _, err = run_cli(capsys, "--steps", "1", *flags)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------------------------------------
# 5. The planner takes the same time whatever the effective batch; 6. --ctx 0 is an error everywhere


def test_micro_batch_candidates_stop_at_what_fits_and_keep_the_next_divisor():
    from minigpt.divisors import largest_fitting, micro_batch_candidates

    assert micro_batch_candidates(128, lambda b: b <= 1000) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert micro_batch_candidates(120, lambda b: b <= 7) == [1, 2, 3, 4, 5, 6, 8]  # 8: the next divisor up
    assert micro_batch_candidates(97, lambda b: b <= 10) == [1, 97]  # a prime: 97 itself is the next one
    assert micro_batch_candidates(12, lambda b: False) == [1]
    tries = []
    assert largest_fitting(lambda b: tries.append(b) or b <= 12_345, 10**14) == 12_345
    assert len(tries) < 40  # doubling then halving: a few dozen tries, not one per number
    with pytest.raises(ValueError, match="at least 1"):
        micro_batch_candidates(0, lambda b: True)


def test_plan_of_a_huge_effective_batch_takes_no_longer_than_a_small_one(capsys):
    """`plan --effective-batch 99999999999999` used to try every divisor (hours); now the share's size does not
    matter. Counted in calls to the memory model, which is what the time is made of."""
    from minigpt import plan as plan_module

    calls = {}
    for batch in (128, 99_999_999_999_999, 1_000_000_007):
        real, n = plan_module._predict_per_gpu, [0]

        def counting(*args, real=real, n=n, **kwargs):
            n[0] += 1
            return real(*args, **kwargs)

        plan_module._predict_per_gpu = counting
        try:
            chosen = plan_module.plan("125m", "t4", 1024, batch)
        finally:
            plan_module._predict_per_gpu = real
        calls[batch] = n[0]
        assert chosen.fits and chosen.micro_batch * chosen.accum == batch
    assert max(calls.values()) <= 4 * calls[128] + 200, calls


@pytest.mark.parametrize(
    "argv",
    [
        ["memory", "--preset", "tiny", "--ctx", "0"],
        ["plan", "--preset", "125m", "--ctx", "0"],
        ["plan", "--table", "--ctx", "0"],
        ["train", "--preset", "tiny", "--ctx", "0", "--steps", "1"],
        ["memory", "--preset", "tiny", "--ctx", "-3"],
    ],
)
def test_ctx_0_is_an_error_in_every_command(argv, capsys):
    from minigpt.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--ctx must be at least 1, got" in err and len(err.strip().splitlines()) == 1


def test_plan_table_honours_preset_and_ctx_and_refuses_gpus_and_shard(capsys):
    from minigpt.cli import main

    assert main(["plan", "--table", "--preset", "10m", "--ctx", "64", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["preset"] for r in rows} == {"10m"} and {r["ctx"] for r in rows} == {64}
    for flags in (["--gpus", "2"], ["--shard", "fsdp"]):
        assert main(["plan", "--table", *flags]) == 2
        assert "--table plans one GPU per row" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------
# 3 (the parts that need no torchrun) and 7. Smaller cases


def test_the_resume_hint_names_the_torchrun_launch(monkeypatch):
    from minigpt.run_messages import resume_command, speaks

    argv = ["train", "--preset", "tiny", "--out", "run dir", "--restart"]
    monkeypatch.setattr("sys.argv", ["/x/minigpt/__main__.py"])
    assert resume_command(argv) == "python -m minigpt train --preset tiny --out 'run dir' --resume"
    for name, value in {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "x"}.items():
        monkeypatch.setenv(name, value)
    assert resume_command(argv) == (
        "torchrun --nproc_per_node 2 --nnodes 2 -m minigpt train --preset tiny --out 'run dir' --resume"
    )
    assert not speaks() and not speaks(ValueError("bad flag"), usage_error=True)  # process 0 says those
    assert speaks(RuntimeError("CUDA out of memory"))  # may be this process's alone
    assert not speaks(RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:5"))  # a peer's echo


def test_an_unreadable_token_cache_is_named_and_rebuilt(tmp_path, capsys):
    from minigpt.data import load_tokens

    corpus = tmp_path / "text.txt"
    corpus.write_text(" ".join(f"word{i % 97} and more" for i in range(3000)))
    first = load_tokens(corpus, cache=tmp_path / "cache")
    (meta,) = (tmp_path / "cache" / "tokens").glob("*.json")
    for damage in ("", "{not json", "[1, 2]", '{"version": 1}'):
        meta.write_text(damage)
        again = load_tokens(corpus, cache=tmp_path / "cache")
        err = capsys.readouterr().err
        assert f"the token cache {meta} is unreadable" in err and "rebuilding it" in err
        assert (again.train == first.train).all() and json.loads(meta.read_text())["n_tokens"] == first.n_tokens
    load_tokens(corpus, cache=tmp_path / "cache")
    assert capsys.readouterr().err == ""  # rebuilt: read as it is from now on


def test_demo_out_that_is_a_file_fails_before_any_demo_runs(tmp_path, capsys):
    from minigpt.cli import main

    (tmp_path / "a_file").write_text("x")
    for out in (tmp_path / "a_file", tmp_path / "a_file" / "sub"):
        assert main(["demo", "all", "--out", str(out)]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and "is not a folder" in captured.err  # no demo printed a line first


def test_a_signal_after_a_completed_run_does_not_fail_it(monkeypatch, capsys):
    """SIGINT while the finished run prints its JSON: the run is complete, the JSON stands, the exit code is 0."""
    import os
    import signal

    from minigpt import train as train_module
    from minigpt.cli import main

    real = train_module.TrainResult.summary

    def summary_then_signal(self):
        os.kill(os.getpid(), signal.SIGINT)
        return real(self)

    monkeypatch.setattr(train_module.TrainResult, "summary", summary_then_signal)
    assert main([*TINY, "--steps", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 1


def test_shard_without_torchrun_is_said_even_under_json(capsys):
    from minigpt.cli import main

    assert main([*TINY, "--steps", "1", "--shard", "zero1", "--json"]) == 0
    captured = capsys.readouterr()
    assert "warning: --shard zero1 with one process: nothing to split" in captured.err
    assert json.loads(captured.out)["config"]["shard"] == "zero1"


def test_resume_while_another_process_trains_before_its_first_save_says_wait(tmp_path, capsys):
    """A run that has not saved yet holds the folder's lock: --resume says it is in use (not "--restart", which
    would only say the same thing after the user tried it)."""
    import multiprocessing

    run = tmp_path / "run"
    ready, done = multiprocessing.Event(), multiprocessing.Event()
    holder = multiprocessing.get_context("fork").Process(target=_hold_the_lock, args=(str(run), ready, done))
    holder.start()
    try:
        assert ready.wait(60)
        code, _, err = run_cli(capsys, "--steps", "1", "--out", str(run), "--resume")
    finally:
        done.set()
        holder.join(60)
    assert code == 1 and "is in use by another run" in err and "has not saved a checkpoint yet" in err
    assert "--restart" not in err and len(err.strip().splitlines()) == 1


def _hold_the_lock(folder: str, ready, done) -> None:
    """In another process: a run that holds its folder and has written a log line, but no checkpoint yet."""
    from minigpt.run_state import RunFolder

    run = RunFolder(folder)
    with run.locked():
        run.log.write_text('{"step": 1, "loss": 9.0}\n')
        ready.set()
        done.wait(60)
