import functools
import json

import pytest
import torch

from minigpt import train as train_module
from minigpt.cli import main
from minigpt.model import GPT, IGNORE_INDEX, ModelConfig, get_config
from minigpt.train import TrainConfig, build_step_state, forward_backward, lr_at, train, train_step

CPU = torch.device("cpu")


def grads_after_window(model: GPT, x, y, micro: int) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    forward_backward(model, list(zip(x.split(micro), y.split(micro))), CPU, "fp32")
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def window_with_padding(cfg: ModelConfig, batch: int = 16, seed: int = 0):
    """A batch whose sequences end in padding of different lengths (targets = IGNORE_INDEX)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.ctx), generator=g)
    y = torch.randint(0, cfg.vocab_size, (batch, cfg.ctx), generator=g)
    for i in range(batch):
        y[i, cfg.ctx - (i * 5) % cfg.ctx :] = IGNORE_INDEX  # 0 to ctx-1 padded targets per sequence
    return x, y


# fp32 sums in a different order differ by a few ulps per term; 1e-5 relative (and 1e-7 absolute for
# gradients that are nearly zero) is ~100x that noise and ~1000x smaller than the mean-of-means error.
TOL = dict(rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("padded", [False, True])
def test_accumulation_parity_16x1_4x4_2x8(tiny_cfg, padded):
    model = GPT(tiny_cfg)
    x, y = window_with_padding(tiny_cfg) if padded else (torch.randint(0, 64, (16, 16)), torch.randint(0, 64, (16, 16)))
    big = grads_after_window(model, x, y, micro=16)
    for micro in (4, 2):
        small = grads_after_window(model, x, y, micro=micro)
        for name in big:
            torch.testing.assert_close(small[name], big[name], **TOL, msg=f"{name} micro={micro}")


def test_mean_of_micro_batch_means_fails_the_parity_check(tiny_cfg):
    """The 2024 trainer bug: average per-micro-batch mean losses. With padding it is wrong."""
    model = GPT(tiny_cfg)
    x, y = window_with_padding(tiny_cfg)
    big = grads_after_window(model, x, y, micro=16)
    model.zero_grad(set_to_none=True)
    for xm, ym in zip(x.split(2), y.split(2)):
        _, mean_loss = model(xm, ym)  # mean over this micro-batch's tokens only
        (mean_loss / 8).backward()
    wrong = {n: p.grad for n, p in model.named_parameters()}
    assert not all(torch.allclose(wrong[n], big[n], **TOL) for n in big)


def test_window_loss_is_mean_over_whole_window_not_last_micro_batch(tiny_cfg):
    model = GPT(tiny_cfg)
    x, y = window_with_padding(tiny_cfg)
    loss = forward_backward(model, list(zip(x.split(4), y.split(4))), CPU, "fp32").item()
    _, expected = model(x, y)  # the mean over every counted target of the window
    assert loss == pytest.approx(expected.item(), rel=1e-5)
    _, last = model(x[-4:], y[-4:])
    assert loss != pytest.approx(last.item(), rel=1e-3)


def test_train_step_reads_loss_and_grad_norm_only_after_the_optimizer_step(tiny_cfg, monkeypatch):
    # On a GPU, reading a tensor's value (.item(), float()) makes the CPU wait for the queued work; a read
    # in mid-step leaves the GPU idle while the CPU queues the rest. So train_step reads once, at the end.
    state = build_step_state(tiny_cfg, TrainConfig(preset="tiny", batch=2, accum=4, ctx=16, device="cpu"), CPU)
    x, y = torch.randint(0, 64, (8, 16)), torch.randint(0, 64, (8, 16))
    with torch.no_grad():
        _, window_loss = state.model(x, y)
    events = []

    def spy(name: str, original):
        def read(self, *args):
            events.append(name)
            return original(self, *args)

        return read

    for name in ("item", "__float__"):
        monkeypatch.setattr(torch.Tensor, name, spy(name, getattr(torch.Tensor, name)))
    state.optimizer.register_step_pre_hook(lambda *_: events.append("optimizer.step"))
    record = train_step(state, list(zip(x.split(2), y.split(2))), CPU, "fp32")
    assert events[0] == "optimizer.step", f"a value was read before the optimizer step: {events}"
    assert isinstance(record["loss"], float) and isinstance(record["grad_norm"], float)
    assert record["loss"] == pytest.approx(window_loss.item(), rel=1e-5)  # the 4 micro-batches' window loss


@pytest.mark.parametrize("dropout", [0.0, 0.2])
@pytest.mark.parametrize("mode", ["full", "sqrt", "selective"])
def test_checkpointing_gives_the_same_gradients(mode, dropout):
    cfg = ModelConfig(n_layer=4, n_head=2, n_embd=32, ctx=16, vocab_size=64, dropout=dropout)
    x = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(1))

    def grads(checkpointing: str) -> dict[str, torch.Tensor]:
        model = GPT(cfg)
        model.checkpointing = checkpointing
        torch.manual_seed(0)  # same dropout masks in the first forward of both runs
        _, loss = model(x, x)
        loss.backward()
        return {n: p.grad for n, p in model.named_parameters()}

    plain, ckpt = grads("none"), grads(mode)
    for name in plain:
        # Recomputation replays the same ops in the same order: equal up to float noise.
        torch.testing.assert_close(ckpt[name], plain[name], rtol=1e-5, atol=1e-6, msg=name)


def test_bf16_autocast_tracks_fp32_over_100_steps(markov_data):
    common = dict(preset="tiny", batch=8, ctx=32, steps=100, lr=3e-3, sample_tokens=0, verbose=False)
    fp32 = train(TrainConfig(precision="fp32", **common), data=markov_data)
    bf16 = train(TrainConfig(precision="bf16", **common), data=markov_data)
    assert fp32.losses[-1] < fp32.losses[0] - 1.0  # it learned something
    tail = lambda r: sum(r.losses[-10:]) / 10  # noqa: E731  (mean of the last 10 steps: less noise)
    # Seed 000 reports 0.04 nats after 100 steps for its model; ours is measured below that on CPU
    # (see chapter 03). 0.05 nats leaves room for a different CPU's bf16 kernels.
    assert abs(tail(bf16) - tail(fp32)) < 0.05


def test_fp16_with_scaler_trains(markov_data):
    r = train(
        TrainConfig(
            preset="tiny", precision="fp16", batch=8, ctx=32, steps=30, lr=3e-3, sample_tokens=0, verbose=False
        ),
        data=markov_data,
    )
    assert all(r["scale"] is not None for r in r.history)
    assert r.losses[-1] < r.losses[0] - 0.5


def test_fp16_without_scaler_loses_small_gradients_and_scaler_keeps_them(tiny_cfg):
    model = GPT(tiny_cfg)
    x = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
    tiny_factor = 2.0**-20  # a loss this small makes fp16 activation gradients fall below 6e-8

    def nonzero_fraction(scaler: torch.amp.GradScaler | None) -> float:
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            _, loss = model(x, x)
        loss = loss * tiny_factor
        (scaler.scale(loss) if scaler else loss).backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return (grads != 0).float().mean().item()

    without = nonzero_fraction(None)
    with_scaler = nonzero_fraction(torch.amp.GradScaler("cpu", init_scale=2.0**16))
    assert without < 0.2  # most gradients flushed to zero
    assert with_scaler > 0.9  # scaled by 2**16 they survive


def test_overflow_skips_step_halves_scale_and_freezes_schedule(markov_data, monkeypatch):
    # A scale of 2**40 makes the fp16 backward overflow: the scaler must skip and halve.
    monkeypatch.setattr(torch.amp, "GradScaler", functools.partial(torch.amp.GradScaler, init_scale=2.0**40))
    cfg = TrainConfig(
        preset="tiny",
        precision="fp16",
        batch=4,
        ctx=32,
        steps=3,
        lr=1e-3,
        warmup_steps=2,
        sample_tokens=0,
        verbose=False,
    )
    before = dict(GPT(get_config("tiny"), seed=cfg.seed).named_parameters())  # train() starts from these
    r = train(cfg, data=markov_data)
    assert [h["skipped"] for h in r.history] == [True, True, True]
    assert [h["scale"] for h in r.history] == [2.0**40, 2.0**39, 2.0**38]
    assert all(h["lr"] == pytest.approx(1e-3 * lr_at(0, cfg)) for h in r.history)  # schedule stood still
    for n, p in r.model.named_parameters():
        assert torch.equal(p.cpu(), before[n]), f"{n} changed on a skipped step"


def test_resume_reproduces_the_uninterrupted_run(markov_data, tmp_path):
    common = dict(preset="tiny", batch=4, ctx=32, steps=8, dropout=0.1, sample_tokens=0, verbose=False, eval_every=4)
    full = train(TrainConfig(out=str(tmp_path / "a"), **common), data=markov_data)
    part = train(
        TrainConfig(out=str(tmp_path / "b"), **common), data=markov_data, on_step=lambda rec: rec["step"] == 3
    )  # "crash" after step 3 (checkpoint saved there)
    assert len(part.history) == 3
    resumed = train(TrainConfig(out=str(tmp_path / "b"), resume=True, **common), data=markov_data)
    assert resumed.losses == full.losses  # exactly equal, not approximately
    assert resumed.val_history == full.val_history
    log = [json.loads(line) for line in (tmp_path / "b" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, 9))


def test_new_run_refuses_to_overwrite_a_checkpoint(markov_data, tmp_path):
    cfg = TrainConfig(preset="tiny", batch=2, ctx=16, steps=1, out=str(tmp_path), sample_tokens=0, verbose=False)
    train(cfg, data=markov_data)
    with pytest.raises(FileExistsError, match="--resume"):
        train(cfg, data=markov_data)


def test_bf16_pure_keeps_everything_in_bf16_and_master_weights_in_fp32(markov_data):
    common = dict(preset="tiny", batch=4, ctx=32, steps=3, sample_tokens=0, verbose=False)
    pure = train(TrainConfig(precision="bf16-pure", **common), data=markov_data)
    assert all(p.dtype == torch.bfloat16 for p in pure.model.parameters())
    master = train(TrainConfig(precision="bf16-pure", master_weights=True, **common), data=markov_data)
    assert all(p.dtype == torch.bfloat16 for p in master.model.parameters())
    assert master.losses[-1] < master.losses[0]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--batch", "0"], "--batch must be at least 1"),
        (["--accum", "0"], "--accum must be at least 1"),
        (["--ctx", "0"], "--ctx must be at least 1"),
        (["--ctx", "4096"], "above the 10m preset's maximum"),
        (["--precision", "fp32", "--dtype", "float16"], "disagree"),
        (["--resume"], "need --out"),
        (["--master-weights"], "bf16-pure"),
        (["--lr", "0"], "--lr must be positive"),
        (["--grad-clip", "-1"], "--grad-clip must be 0"),
        (["--warmup-steps", "500", "--steps", "100"], "--warmup-steps must be between 0 and --steps (100)"),
    ],
)
def test_bad_train_flags_are_clear_errors(flags, message, capsys):
    assert main(["train", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("flags", [["--preset", "7b"], ["--precision", "fp8"], ["--checkpointing", "half"]])
def test_unknown_choices_are_rejected_by_the_parser(flags, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *flags])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_schedule_and_clip_flags_reach_the_config():
    from minigpt.cli import build_parser, train_config_from_args

    args = build_parser().parse_args(["train", "--warmup-steps", "3", "--grad-clip", "0.5", "--lr", "3e-4"])
    cfg = train_config_from_args(args)
    assert (cfg.warmup, cfg.grad_clip, cfg.lr) == (3, 0.5, 3e-4)
    assert lr_at(0, cfg) == pytest.approx(1 / 3)  # first step of a 3-step linear warmup


def send_signal_after_step(step: int, sig: int):
    """An on_step that sends this process `sig` once the given step is done, as Ctrl-C or `kill` would."""
    import os

    def on_step(record: dict) -> None:
        if record["step"] == step:
            os.kill(os.getpid(), sig)  # the handler runs in this (main) thread before os.kill returns

    return on_step


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_stops_after_the_step_saves_and_resume_matches_the_straight_run(markov_data, tmp_path, sig):
    import signal

    common = dict(preset="tiny", batch=4, ctx=32, steps=6, dropout=0.1, sample_tokens=0, verbose=False)
    full = train(TrainConfig(**common), data=markov_data)
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    cut = train(
        TrainConfig(out=str(tmp_path), **common),
        data=markov_data,
        on_step=send_signal_after_step(2, signal.Signals[sig]),
    )
    assert cut.interrupted == sig and len(cut.history) == 2  # save_every is 0, yet step 2 was saved
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # put back
    resumed = train(TrainConfig(out=str(tmp_path), resume=True, **common), data=markov_data)
    assert resumed.interrupted is None and resumed.losses == full.losses  # exactly: the step was never cut


def test_a_signal_without_out_returns_the_model_trained_so_far(markov_data):
    import signal

    cfg = TrainConfig(preset="tiny", batch=2, ctx=16, steps=5, sample_tokens=20, verbose=False)
    cut = train(cfg, data=markov_data, on_step=send_signal_after_step(3, signal.SIGINT))
    assert cut.interrupted == "SIGINT" and len(cut.history) == 3 and cut.sample == ""  # no sampling after a stop
    untrained = GPT(get_config("tiny"), seed=cfg.seed)
    assert not torch.equal(cut.model.tok_emb.weight, untrained.tok_emb.weight)  # the notebook keeps the 3 steps


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_nan_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(markov_data, tmp_path, precision, monkeypatch):
    import minigpt.train as train_module
    from minigpt.run_state import load_checkpoint
    from minigpt.train import TrainingDiverged

    built = []
    real_build = train_module.build_step_state
    monkeypatch.setattr(train_module, "build_step_state", lambda *args: built.append(real_build(*args)) or built[-1])

    def poison_after_step_3(record: dict) -> None:
        if record["step"] == 3:  # a NaN weight: the next forward's loss is NaN, as after a blow-up
            with torch.no_grad():
                next(built[0].model.parameters()).fill_(float("nan"))

    cfg = TrainConfig(
        preset="tiny", precision=precision, batch=2, ctx=16, steps=8, save_every=2, out=str(tmp_path), verbose=False
    )
    with pytest.raises(TrainingDiverged) as info:
        train(cfg, data=markov_data, on_step=poison_after_step_3)
    message = str(info.value)
    assert "loss is nan at step 4" in message and "last good checkpoint (step 2)" in message
    assert "--lr" in message and "--corpus" in message and "precision" in message
    saved = load_checkpoint(tmp_path / "checkpoint.pt")
    assert saved["step"] == 2  # the diverged state was not saved (nor step 3's, which save_every=2 skips)
    assert all(torch.isfinite(v).all() for v in saved["model"].values())
    assert len(info.value.result.history) == 3  # what was trained before the bad step


@pytest.mark.parametrize("save_every", [0, 2])
def test_weights_ruined_by_the_last_update_are_never_saved(markov_data, tmp_path, save_every):
    """The loss of a step is measured before its update: an update that ruins the weights (lr 1e30) shows only in
    the next loss, the validation loss or the weights themselves. The run stops there and keeps what it had."""
    from minigpt.run_state import load_checkpoint
    from minigpt.train import TrainingDiverged

    steps = 2 if not save_every else 3
    cfg = TrainConfig(
        preset="tiny",
        batch=2,
        ctx=16,
        steps=steps,
        lr=1e30,  # weights of 1e30: the next forward overflows fp32 on every CPU (1e6 did not on all)
        warmup_steps=0,
        save_every=save_every,
        out=str(tmp_path),
        verbose=False,
        sample_tokens=8,
    )
    with pytest.raises(TrainingDiverged, match="training diverged"):
        train(cfg, data=markov_data)
    if (tmp_path / "checkpoint.pt").exists():
        assert all(torch.isfinite(v).all() for v in load_checkpoint(tmp_path / "checkpoint.pt")["model"].values())


def test_the_log_is_strict_json():
    """A skipped fp16 step's inf loss is written as null: Python's json would write a bare Infinity."""
    from minigpt.train import json_line

    line = json_line({"step": 3, "loss": float("inf"), "val_loss": float("nan"), "lr": 1e-3, "skipped": True})
    assert "Infinity" not in line and "NaN" not in line
    assert json.loads(line) == {"step": 3, "loss": None, "val_loss": None, "lr": 1e-3, "skipped": True}


def test_resuming_a_finished_run_says_so_and_trains_nothing(markov_data, tmp_path, capsys):
    cfg = dict(preset="tiny", batch=2, ctx=16, steps=3, out=str(tmp_path), sample_tokens=0)
    train(TrainConfig(verbose=False, **cfg), data=markov_data)
    before = (tmp_path / "checkpoint.pt").read_bytes()
    again = train(TrainConfig(resume=True, **cfg), data=markov_data)
    out = capsys.readouterr().out
    assert again.already_finished and len(again.history) == 3
    assert "already finished: 3 of 3 steps" in out and "done:" not in out
    assert (tmp_path / "checkpoint.pt").read_bytes() == before


def test_resume_with_other_settings_names_them_before_any_work(markov_data, tmp_path):
    train(TrainConfig(preset="tiny", batch=2, ctx=16, steps=2, out=str(tmp_path), verbose=False), data=markov_data)
    changed = TrainConfig(preset="tiny-deep", precision="bf16", ctx=32, steps=4, out=str(tmp_path), resume=True)
    with pytest.raises(ValueError, match="--preset: saved tiny, given tiny-deep; --precision: saved fp32, given bf16"):
        train(changed, data=markov_data)


def test_a_second_run_on_a_locked_folder_fails_and_leaves_it_alone(markov_data, tmp_path):
    from minigpt.run_state import RunFolder, RunFolderBusy

    cfg = dict(preset="tiny", batch=2, ctx=16, steps=2, out=str(tmp_path), verbose=False, sample_tokens=0)
    train(TrainConfig(**cfg), data=markov_data)
    before = (tmp_path / "checkpoint.pt").read_bytes()
    with RunFolder(tmp_path).locked(), pytest.raises(RunFolderBusy, match="pid"):  # another run holds it
        train(TrainConfig(**{**cfg, "steps": 4}, resume=True), data=markov_data)
    assert (tmp_path / "checkpoint.pt").read_bytes() == before


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("lr", float("nan"), "--lr must be positive"),
        ("lr", float("inf"), "--lr must be positive"),
        ("dropout", 1.0, "--dropout must be in"),
        ("save_every", -1, "--save-every must be 0 or more"),
        ("eval_every", -2, "--eval-every must be 0 or more"),
        ("grad_clip", float("nan"), "--grad-clip must be 0"),
        ("seed", -1, "--seed must be between"),
    ],
)
def test_values_outside_their_range_are_rejected(field, value, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{field: value})


def test_adamw_is_fused_where_the_device_has_the_kernel_and_updates_like_foreach(tiny_cfg):
    """make_optimizer picks the fused kernel on the CPU (torch >= 2.4); it must update exactly as foreach does."""
    from minigpt.train import fused_adamw_supported, make_optimizer

    assert fused_adamw_supported("cpu")
    models = [GPT(tiny_cfg, seed=0) for _ in range(2)]
    fused = make_optimizer(list(models[0].parameters()), TrainConfig(preset="tiny"))
    assert fused.defaults["fused"] and not fused.defaults["foreach"]
    foreach = torch.optim.AdamW(
        [
            {"params": [p for p in models[1].parameters() if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in models[1].parameters() if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=1e-3,
        betas=(0.9, 0.95),
        foreach=True,
    )
    x, y = torch.randint(0, 64, (4, 16)), torch.randint(0, 64, (4, 16))
    for _ in range(3):
        for model, opt in zip(models, (fused, foreach)):
            model(x, y)[1].backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    for (name, a), b in zip(models[0].named_parameters(), models[1].parameters()):
        # the same fp32 update math in another order of operations: a few ulps apart (TOL is ~100x that)
        torch.testing.assert_close(a, b, **TOL, msg=name)


@pytest.mark.parametrize("precision, checkpointing", [("fp32", "none"), ("bf16", "selective"), ("fp16", "full")])
def test_compiled_training_matches_eager(markov_data, precision, checkpointing):
    """compile=True runs the same math through generated kernels: the same losses, up to rounding."""
    common = dict(
        preset="tiny",
        precision=precision,
        checkpointing=checkpointing,
        batch=4,
        ctx=32,
        steps=4,
        sample_tokens=0,
        verbose=False,
    )
    eager = train(TrainConfig(**common), data=markov_data)
    compiled = train(TrainConfig(**common, compile=True), data=markov_data)
    # Fused kernels round differently: fp32 agrees to ~1e-6, and 16-bit autocast rounds every matmul input to
    # 8 (bf16) or 11 (fp16) mantissa bits, about 4e-3 / 5e-4 relative; four steps stay well inside 1e-2 nats.
    tolerance = 1e-4 if precision == "fp32" else 1e-2
    assert all(abs(a - b) < tolerance for a, b in zip(eager.losses, compiled.losses)), (eager.losses, compiled.losses)
    assert isinstance(compiled.model, GPT)  # the result holds the model itself, not its compiled wrapper


def test_compile_refuses_where_it_cannot_work(monkeypatch):
    from minigpt import device

    monkeypatch.setattr(device.shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match="C\\+\\+ compiler"):
        device.check_compile(CPU)
    with pytest.raises(ValueError, match="mps"):
        device.check_compile(torch.device("mps"))


class FakeClock:
    """A time source the test moves by hand, so when a log line is due does not depend on the machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def step_lines(lines: list[str]) -> list[int]:
    return [int(line.split()[1].split("/")[0]) for line in lines]


def test_step_log_prints_every_tenth_of_the_run_and_the_last_step():
    lines: list[str] = []
    log = train_module.StepLog(25, lambda text, **_: lines.append(text), clock=FakeClock())
    for step in range(1, 26):
        log.update({"step": step, "loss": 5.1234, "tokens_per_s": 3210.4})
    assert step_lines(lines) == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 25]
    assert lines[0] == "step 2/25  loss 5.123  3,210 tokens/s"


def test_step_log_prints_after_enough_seconds_even_between_step_groups():
    lines: list[str] = []
    clock = FakeClock()
    log = train_module.StepLog(1000, lambda text, **_: lines.append(text), every_s=10.0, clock=clock)
    for step in range(1, 6):
        clock.now = 4.0 * step  # 4 s per step: due at 12 s (step 3) and again 12 s later
        log.update({"step": step, "loss": 1.0, "tokens_per_s": 1.0})
    assert step_lines(lines) == [3]


@pytest.mark.parametrize(
    ("forced", "tty", "kernel", "bar"),
    [
        (None, True, False, True),
        (None, False, True, True),
        (None, False, False, False),
        (False, True, True, False),
        (True, False, False, True),
    ],
)
def test_the_bar_shows_in_a_terminal_or_a_notebook_unless_forced(monkeypatch, forced, tty, kernel, bar):
    monkeypatch.setattr(train_module.sys.stderr, "isatty", lambda: tty, raising=False)
    monkeypatch.setattr(train_module, "in_notebook_kernel", lambda: kernel)
    assert train_module._progress_enabled(TrainConfig(progress=forced)) is bar


def test_no_kernel_is_detected_outside_jupyter(monkeypatch):
    monkeypatch.delitem(train_module.sys.modules, "ipykernel", raising=False)
    assert not train_module.in_notebook_kernel()


def test_without_a_bar_train_logs_steps_only_when_verbose(markov_data, monkeypatch, capsys):
    monkeypatch.setattr(train_module, "_progress_enabled", lambda cfg: False)  # a pipe or CI
    cfg = dict(preset="tiny", batch=2, ctx=16, steps=20, sample_tokens=0)
    train(TrainConfig(verbose=False, **cfg), data=markov_data)
    assert capsys.readouterr().out == ""
    train(TrainConfig(verbose=True, **cfg), data=markov_data)
    out = capsys.readouterr().out
    assert [line.split()[1] for line in out.splitlines() if line.startswith("step ")][-1] == "20/20"
    assert "loss" in out and "tokens/s" in out


def test_a_signal_during_the_stop_vote_waits_for_the_next_step(monkeypatch):
    """Under torchrun every process must stop at the same step. A SIGTERM that lands on one process while the
    processes sum their stop votes is counted at the next step; read again after the sum, it stopped that
    process alone while the others went on into the next step's collective and waited for ever (a CI hang)."""
    from minigpt.run_state import StopSignals

    stop_signal = StopSignals()

    def sum_as_the_signal_lands(value):
        stop_signal.received = "SIGTERM"  # arrives during the all-reduce, after this process sent its vote
        return value  # the other process voted 0

    monkeypatch.setattr(train_module.parallel, "sum_across_processes", sum_as_the_signal_lands)
    assert train_module._stop_requested(stop_signal, world=2) is None  # go on, as the others do
    assert train_module._stop_requested(stop_signal, world=2) == "SIGTERM"  # and stop together a step later
