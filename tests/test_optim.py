"""The optimizer levers: AdamW8bit (minigpt/optim/adamw8bit.py) and the step in backward (optim/in_backward.py)."""

import io
import json
import re

import pytest
import torch

from minigpt.cli import main
from minigpt.config import TrainConfig
from minigpt.device import check_compile
from minigpt.model import get_config
from minigpt.optim.adamw8bit import MIN_QUANTIZED, AdamW8bit, adamw_update_, state_bytes
from minigpt.optim.codes import BLOCK, LINEAR_CODE, M_CODE, V_CODE, dequantize, quantize
from minigpt.optim.kernel import kernel_library
from minigpt.step import build_step_state, train_step
from minigpt.train import train

CPU = torch.device("cpu")


def second_moments(n_blocks: int = 4) -> torch.Tensor:
    """v as a trained model has it: within one block, values spread over ten decades (1 down to 1e-10)."""
    gen = torch.Generator().manual_seed(0)
    return torch.logspace(0, -10, BLOCK * n_blocks)[torch.randperm(BLOCK * n_blocks, generator=gen)]


# ------------------------------------------------------------------------------------------------------------
# The codes


def test_a_linear_code_flushes_small_second_moments_to_zero_and_the_update_explodes():
    """Why v needs a non-linear code: AdamW divides by sqrt(v), and a v rounded to 0 leaves only eps."""
    v = second_moments()
    m = v.sqrt() * 0.5  # an update m / sqrt(v) of 0.5 everywhere, as AdamW's are: of order 1
    eps = 1e-8
    linear = dequantize(*quantize(v, LINEAR_CODE), LINEAR_CODE)
    # a linear code's step is absmax / 255: every v under half of it (about 2e-3 of the block's largest) is 0
    assert (linear == 0).sum() > 0.5 * v.numel()
    assert (m / (linear.sqrt() + eps)).max() > 1e3  # where v became 0: m / eps, thousands of times too large
    power = dequantize(*quantize(v, V_CODE), V_CODE)
    assert (power > 0).all()  # the power code's smallest step is absmax * 255**-4, about 2e-10
    update = m / (power.sqrt() + eps)
    # v down to 1e-8 of its block's largest keeps sqrt(v) within 1/q, q = 255 * (v/absmax)**(1/4) >= 2.5
    kept = v >= 1e-8
    assert (update[kept] - 0.5).abs().max() < 0.5 * 0.45


def test_the_second_moment_code_keeps_sqrt_v_within_one_part_in_its_code():
    """Derived bound: u = (v/s)**(1/4) is rounded to the nearest of 255 steps, |u' - u| <= 1/510; sqrt(v) is
    s**(1/2) u**2, so its relative error is |u'^2 - u^2| / u^2 <= 2|u' - u|/u + (u' - u)^2/u^2
    = 1/(255 u) + 1/(255 u)^2 / 4, i.e. about one part in the code q = 255 u."""
    v = second_moments()
    codes, scales = quantize(v, V_CODE)
    assert codes.dtype == torch.uint8 and scales.shape == (v.numel() // BLOCK,)
    back = dequantize(codes, scales, V_CODE)
    u = (v / scales.repeat_interleave(BLOCK)) ** 0.25
    bound = 1 / (255 * u) + 1 / (255 * u) ** 2 / 4
    relative = (back.sqrt() - v.sqrt()).abs() / v.sqrt()
    assert (relative <= bound * (1 + 1e-4) + 1e-6).all()  # (+ fp32 rounding of the arithmetic)


def test_the_first_moment_code_is_signed_and_its_error_is_bounded():
    """w = sqrt(|m|/s) is rounded to the nearest of 127 steps, |w' - w| <= 1/254, so
    |m' - m| / s = |w'^2 - w^2| <= 2 w / 254 + 1 / 254**2: at most 1/127 of the block's largest."""
    gen = torch.Generator().manual_seed(1)
    m = torch.randn(3 * BLOCK + 17, generator=gen) * torch.logspace(0, -6, 3 * BLOCK + 17)  # a partial last block
    codes, scales = quantize(m, M_CODE)
    assert codes.dtype == torch.int8 and scales.numel() == 4
    back = dequantize(codes, scales, M_CODE)
    s = scales.repeat_interleave(BLOCK)[: m.numel()]
    w = (m.abs() / s).sqrt()
    assert (torch.sign(back) * torch.sign(m) >= 0).all()  # never the wrong sign
    assert ((back - m).abs() / s <= 2 * w / 254 + 1 / 254**2 + 1e-6).all()


def test_dequantize_is_the_codes_formula_for_every_code():
    """dequantize squares q as q * |q| (the sign kept by the product): the same bits as the formula
    sign(q) * (|q| / levels) ** power * scale written out, for every byte, with or without its buffers."""
    scales = torch.tensor([1.0, 3.7e-5])
    for code in (M_CODE, V_CODE, LINEAR_CODE):
        info = torch.iinfo(code.dtype)
        q = torch.arange(max(info.min, -code.levels), code.levels + 1).to(code.dtype)
        q = torch.cat([q, q, q[: BLOCK - q.numel()], q[: BLOCK - q.numel()]])  # two full blocks
        magnitude = q.float().abs()
        for _ in range(code.square_roots):
            magnitude = magnitude * magnitude
        formula = (magnitude * (scales / code.levels**code.power).repeat_interleave(BLOCK)).copysign(q.float())
        assert torch.equal(dequantize(q, scales, code), formula)
        out, scratch = torch.full((q.numel(),), float("nan")), torch.full((q.numel(),), float("nan"))
        assert torch.equal(dequantize(q, scales, code, out=out, scratch=scratch), formula)
        assert torch.equal(out, formula)


def test_the_steps_shared_buffers_change_no_number():
    """One step works every chunk in the same three buffers: tensors of several chunks, a partial last chunk
    and block, and an fp32-state tensor stepped together give what each stepped alone gives."""
    gen = torch.Generator().manual_seed(3)
    shapes = [(5 * BLOCK + 40,), (64,), (3 * BLOCK,), (2 * BLOCK + 1,)]
    together = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
    alone = [torch.nn.Parameter(p.detach().clone()) for p in together]
    opt = AdamW8bit(together, chunk=2 * BLOCK, min_quantized=100, weight_decay=0.1)
    opts = [AdamW8bit([p], chunk=2 * BLOCK, min_quantized=100, weight_decay=0.1) for p in alone]
    for _ in range(3):
        grads = [torch.randn(s, generator=gen) for s in shapes]
        for a, b, g in zip(together, alone, grads):
            a.grad, b.grad = g.clone(), g.clone()
        opt.step()
        for o in opts:
            o.step()
    for a, b, o in zip(together, alone, opts):
        assert torch.equal(a, b)
        assert all(torch.equal(opt.state[a][k], t) for k, t in o.state[b].items() if torch.is_tensor(t))


def test_state_bytes_are_two_codes_and_two_scales_per_block_or_fp32_for_small_tensors():
    big, small = torch.nn.Parameter(torch.randn(40, 130)), torch.nn.Parameter(torch.randn(64))  # 5200: 21 blocks
    opt = AdamW8bit([big, small])
    for p in (big, small):
        p.grad = torch.randn_like(p)
    opt.step()
    for p in (big, small):
        held = sum(t.untyped_storage().nbytes() for t in opt.state[p].values() if torch.is_tensor(t))
        assert held == state_bytes(p.numel())
    assert state_bytes(big.numel()) == 2 * (5200 + 4 * 21)
    assert state_bytes(small.numel()) == 8 * 64 and small.numel() < MIN_QUANTIZED


# ------------------------------------------------------------------------------------------------------------
# AdamW8bit against torch's AdamW


def run_both(steps: int, shapes: list[tuple[int, ...]], lr: float = 1e-3):
    """The same parameters and gradients through torch's AdamW (for-loop) and AdamW8bit; their parameters."""
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(s, generator=gen) for s in shapes]
    a = [torch.nn.Parameter(t.clone()) for t in start]
    b = [torch.nn.Parameter(t.clone()) for t in start]
    settings = dict(lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    ref, ours = torch.optim.AdamW(a, foreach=False, **settings), AdamW8bit(b, chunk=2 * BLOCK, **settings)
    for _ in range(steps):
        for p, q in zip(a, b):
            g = torch.randn(p.shape, generator=gen)
            p.grad, q.grad = g.clone(), g.clone()
        ref.step()
        ours.step()
    return start, a, b


def test_small_tensors_keep_fp32_state_and_follow_torch_adamw_exactly():
    """The same fp32 ops in the same order as torch's for-loop AdamW: bitwise the same parameters."""
    _, a, b = run_both(10, [(100,)])
    assert torch.equal(a[0], b[0])


def test_quantized_moments_move_the_weights_as_fp32_adamw_does():
    """Each update's error is that of its m (<= 1/127 of its block's largest |m|) and of its sqrt(v) (about 1/q,
    q >= 100 for Gaussian gradients, whose v within a block stay within a decade or two of the largest): a
    few percent of one update. Over 30 steps of random gradients the weights' path differs by less than 10%
    of the distance they moved, and every weight moved the same way."""
    start, a, b = run_both(30, [(70, 100)])  # 7000 values: 28 blocks, 4 chunks (the last one partial)
    moved_fp32, moved_8bit = a[0].detach() - start[0], b[0].detach() - start[0]
    assert (moved_8bit - moved_fp32).norm() < 0.1 * moved_fp32.norm()
    assert torch.nn.functional.cosine_similarity(moved_fp32.flatten(), moved_8bit.flatten(), dim=0) > 0.99


def test_adamw_update_is_torch_adamw():
    p, q = torch.randn(50), torch.randn(50)
    ref = torch.nn.Parameter(p.clone())
    ref.grad = q.clone()
    torch.optim.AdamW([ref], lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.2, foreach=False).step()
    mine, m, v = p.clone(), torch.zeros(50), torch.zeros(50)
    adamw_update_(mine, q, m, v, step=1, lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.2)
    assert torch.equal(mine, ref.detach())


def test_the_state_dict_round_trips_the_codes_and_scales_even_for_bf16_parameters():
    """torch's load_state_dict would cast every state tensor to the parameter's dtype (scales to bf16)."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(80, 64, generator=gen).bfloat16()) for _ in range(2)]
    opt = AdamW8bit(params)
    grads = [[torch.randn(80, 64, generator=gen).bfloat16() for _ in params] for _ in range(4)]
    for step in grads[:2]:
        for p, g in zip(params, step):
            p.grad = g
        opt.step()
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    loaded = AdamW8bit(twins)
    loaded.load_state_dict(torch.load(io.BytesIO(buffer.getvalue())))
    for p in twins:
        assert loaded.state[p]["exp_avg_scales"].dtype == torch.float32
        assert loaded.state[p]["exp_avg_codes"].dtype == torch.int8
    for step in grads[2:]:  # the straight optimizer and the reloaded one go on identically
        for p, q, g in zip(params, twins, step):
            p.grad, q.grad = g.clone(), g.clone()
        opt.step()
        loaded.step()
    assert all(torch.equal(p, q) for p, q in zip(params, twins))


def test_loading_another_optimizers_state_says_so():
    p = torch.nn.Parameter(torch.randn(80, 64))
    p.grad = torch.randn_like(p)
    adamw = torch.optim.AdamW([p])
    adamw.step()
    with pytest.raises(ValueError, match="not AdamW8bit's.*exp_avg"):
        AdamW8bit([p]).load_state_dict(adamw.state_dict())


# ------------------------------------------------------------------------------------------------------------
# The step in backward


def steps(cfg: TrainConfig, n: int, seed: int = 0) -> tuple[object, list[dict]]:
    """n train_steps on random tokens; the step state and the records."""
    state = build_step_state(get_config(cfg.preset), cfg, CPU)
    gen = torch.Generator().manual_seed(seed)
    records = []
    for _ in range(n):
        tokens = torch.randint(0, state.model.cfg.vocab_size, (cfg.batch, cfg.ctx + 1), generator=gen)
        records.append(train_step(state, [(tokens[:, :-1], tokens[:, 1:])], CPU, cfg.precision, cfg.grad_clip))
    return state, records


def test_the_tied_embedding_is_stepped_once_with_both_contributions():
    """register_post_accumulate_grad_hook runs once per backward, after autograd has summed lm_head's
    gradient and the embedding's into .grad: the gradient the hook sees is the ordinary backward's .grad."""
    cfg = TrainConfig(preset="tiny", batch=2, ctx=16, grad_clip=0)
    plain = build_step_state(get_config("tiny"), cfg, CPU)
    tokens = torch.randint(0, 8192, (2, 17), generator=torch.Generator().manual_seed(0))
    x, y = tokens[:, :-1], tokens[:, 1:]
    plain.model(x, y)[1].backward()
    full_grad = plain.model.tok_emb.weight.grad.clone()

    fused = build_step_state(get_config("tiny"), TrainConfig(**{**cfg.__dict__, "optimizer_in_backward": True}), CPU)
    weight = fused.model.tok_emb.weight
    assert fused.model.lm_head.weight is weight  # one Parameter, two uses
    calls, seen = [], []
    weight.register_post_accumulate_grad_hook(lambda p: calls.append(p))  # runs after the stepping hook
    fused.in_backward.watch = lambda g: g.shape == weight.shape and seen.append(g.clone())  # only it is (V, C)
    fused.model(x, y)[1].backward()
    assert len(calls) == len(seen) == 1  # one hook call for the embedding, after both contributions
    assert torch.equal(seen[0], full_grad)
    assert weight.grad is None  # freed by its hook


@pytest.mark.parametrize(
    "precision, master, optimizer, checkpointing",
    [
        ("fp32", False, "adamw", "none"),
        ("bf16", False, "adamw8bit", "full"),
        ("bf16-pure", False, "adamw", "selective"),
        ("bf16-pure", True, "adamw8bit", "sqrt"),
    ],
)
def test_after_n_steps_the_parameters_equal_the_ordinary_steps(precision, master, optimizer, checkpointing):
    """Tolerance 0, derived: backward computes the same gradients (the hooks change none of its ops, and a
    parameter is updated only after its gradient is complete, when no later op of backward reads it), and each
    update is the same kernel on the same gradient and state; only its moment changes. So: bitwise equal."""
    common = dict(preset="tiny", batch=2, ctx=32, grad_clip=0, precision=precision, master_weights=master)
    common.update(optimizer=optimizer, checkpointing=checkpointing)
    ordinary, plain_records = steps(TrainConfig(**common), 4)
    in_backward, records = steps(TrainConfig(**common, optimizer_in_backward=True), 4)
    for p, q in zip(ordinary.model.parameters(), in_backward.model.parameters()):
        assert torch.equal(p, q)
    assert [r["loss"] for r in records] == [r["loss"] for r in plain_records]
    # the schedule moved once per step: the same learning rates, and the same number of schedule steps
    assert [r["lr"] for r in records] == [r["lr"] for r in plain_records]
    assert in_backward.scheduler.last_epoch == ordinary.scheduler.last_epoch == 4
    # the logged grad norm: the same squares summed in another order (per tensor, then over tensors), in fp32
    # (clip_grad_norm_ sums in the gradients' dtype: bf16 under bf16-pure, 2**-8 relative)
    rel = 2**-8 if precision == "bf16-pure" and not master else 1e-5
    for r, plain in zip(records, plain_records):
        assert r["grad_norm"] == pytest.approx(plain["grad_norm"], rel=rel)
    assert all(p.grad is None for p in in_backward.model.parameters())


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(optimizer="sgd"), "unknown --optimizer 'sgd'; choose one of: adamw, adamw8bit"),
        (dict(optimizer_in_backward=True), "--optimizer-in-backward with --grad-clip 1: clipping by the global norm"),
        (
            dict(optimizer_in_backward=True, grad_clip=0, accum=2),
            "--optimizer-in-backward with --accum 2: accumulation needs each gradient",
        ),
        (
            dict(optimizer_in_backward=True, grad_clip=0, precision="fp16"),
            "--optimizer-in-backward with --precision fp16: the GradScaler",
        ),
        (dict(optimizer_in_backward=True, grad_clip=0, shard="fsdp"), "--optimizer-in-backward with --shard fsdp"),
        (dict(optimizer="adamw8bit", shard="zero1"), "--optimizer adamw8bit with --shard zero1"),
    ],
)
def test_settings_that_cannot_work_are_one_clear_line(settings, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)) as err:
        TrainConfig(**settings)
    assert "\n" not in str(err.value)


def test_the_cli_names_the_choices_and_the_reason(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--optimizer", "sgd"])
    assert exit_info.value.code == 2
    assert "'adamw', 'adamw8bit'" in capsys.readouterr().err
    assert main(["train", "--optimizer-in-backward", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("minigpt train: error: --optimizer-in-backward with --grad-clip 1") and err.count("\n") == 1


# ------------------------------------------------------------------------------------------------------------
# Checkpoints: an interrupted and resumed run equals a straight one


@pytest.mark.parametrize(
    "levers", [dict(optimizer="adamw8bit"), dict(optimizer="adamw8bit", optimizer_in_backward=True)]
)
def test_resume_reproduces_the_uninterrupted_run(markov_data, tmp_path, levers):
    common = dict(preset="tiny", batch=4, ctx=32, steps=6, sample_tokens=0, verbose=False, eval_every=3, grad_clip=0)
    common.update(levers)
    full = train(TrainConfig(out=str(tmp_path / "a"), **common), data=markov_data)
    part = train(TrainConfig(out=str(tmp_path / "b"), **common), data=markov_data, on_step=lambda r: r["step"] == 2)
    assert len(part.history) == 2
    saved = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)
    assert any(s["exp_avg_codes"].dtype == torch.int8 for s in saved["optimizer"]["state"].values() if len(s) == 5)
    resumed = train(TrainConfig(out=str(tmp_path / "b"), resume=True, **common), data=markov_data)
    assert resumed.losses == full.losses  # exactly equal, not approximately
    assert resumed.val_history == full.val_history
    for p, q in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(p, q)


def test_resume_with_another_optimizer_names_both_and_loses_nothing(markov_data, tmp_path):
    common = dict(preset="tiny", batch=2, ctx=16, steps=2, out=str(tmp_path), verbose=False, sample_tokens=0)
    train(TrainConfig(optimizer="adamw8bit", **common), data=markov_data)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(ValueError, match="--optimizer: saved adamw8bit, given adamw"):
        train(TrainConfig(**{**common, "steps": 4}, resume=True), data=markov_data)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert [json.loads(line)["step"] for line in (tmp_path / "log.jsonl").read_text().splitlines()] == [1, 2]


def test_minigpt_memory_shows_each_lever_as_the_term_it_changes(capsys):
    assert main(["memory", "--preset", "tiny", "--batch", "1", "--ctx", "16", "--device", "cpu"]) == 0
    plain = capsys.readouterr().out
    flags = ["--optimizer", "adamw8bit", "--optimizer-in-backward"]
    assert main(["memory", "--preset", "tiny", "--batch", "1", "--ctx", "16", "--device", "cpu", *flags]) == 0
    out = capsys.readouterr().out
    assert "--optimizer adamw8bit: optimizer 4.8 -> 1.2 MiB predicted" in out
    assert "--optimizer-in-backward: gradients 2.4 -> 2.0 MiB predicted" in out
    assert "adamw8bit in backward" in out and "adamw8bit" not in plain


# ------------------------------------------------------------------------------------------------------------
# The compiled step: one fused pass (AdamW8bit(compile=True), --compile), by either kernel: the C loop
# (minigpt/optim/kernel.py, tests/test_optim_kernel.py) or torch.compile's pass, a chunk a call

# fp32 with a partial last block (3 whole blocks compiled, 232 values eager), bf16 (its update in fp32, the
# parameter rounded to bf16), and one under min_quantized (fp32 moments, always eager)
COMPILED_SHAPES = [((10, 100), torch.float32), ((3, BLOCK), torch.bfloat16), ((50,), torch.float32)]
COMPILED_SETTINGS = dict(lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, min_quantized=100, chunk=4 * BLOCK)


def make_pair(kernel: str) -> tuple:
    """An eager and a compiled AdamW8bit (by `kernel`) over twin parameters, each stepped once (with inductor the
    first step compiles: one graph per parameter dtype, shared by every test here)."""
    try:
        check_compile(CPU) if kernel == "inductor" else kernel_library()
    except ValueError as e:
        pytest.skip(str(e))
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(shape, generator=gen).to(dtype) for shape, dtype in COMPILED_SHAPES]
    eager = [torch.nn.Parameter(t.clone()) for t in start]
    fused = [torch.nn.Parameter(t.clone()) for t in start]
    pair = AdamW8bit(eager, **COMPILED_SETTINGS), AdamW8bit(fused, compile=True, kernel=kernel, **COMPILED_SETTINGS)
    for opt, params in zip(pair, (eager, fused)):
        for p in params:
            p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(1)).to(p.dtype)
        opt.step()
    return pair, gen


@pytest.fixture(scope="module", params=["c", "inductor"])
def compiled_pair(request):
    return make_pair(request.param)


@pytest.fixture(scope="module")
def inductor_pair():
    return make_pair("inductor")


def eager_moments(opt: AdamW8bit, p: torch.Tensor, grad: torch.Tensor) -> dict[str, torch.Tensor]:
    """The fp32 m and v of the eager path's next step (the values its codes round), from opt's current state."""
    state, group = opt.state[p], opt.param_groups[0]
    m = dequantize(state["exp_avg_codes"], state["exp_avg_scales"], M_CODE)
    v = dequantize(state["exp_avg_sq_codes"], state["exp_avg_sq_scales"], V_CODE)
    hyper = dict(lr=group["lr"], betas=group["betas"], eps=group["eps"], weight_decay=group["weight_decay"])
    adamw_update_(p.detach().reshape(-1).float().clone(), grad.reshape(-1).float(), m, v, state["step"] + 1, **hyper)
    return {"exp_avg_codes": m, "exp_avg_sq_codes": v}


def test_the_compiled_step_gives_the_eager_steps_codes_scales_and_weights(compiled_pair):
    """Five steps, each from the same state (one path's state_dict loaded into the other, alternately: the two
    are interchangeable) on the same gradients.

    The tolerance. Both paths compute the same formulas in fp32 but round differently: eager's lerp and
    addcmul are fused multiply-adds (inductor's CPU code has none; the C loop has those two); the compiled pass
    (either kernel) multiplies by 1/sqrt(bias correction) where eager divides, decodes with
    scale * (1 / levels**power) where eager divides the scale by levels**power (one rounding more on the decoded
    m and v), and takes v's code from sqrt(v) (v's scale is the largest v in both: the bound below counts two
    roundings more on it all the same); and eager's vectorized sqrt is off by up to 0.75 ulp where inductor's
    is exact. That is at most about 16 roundings, 16 * 2**-24 = 2**-20 relative, on m, v, the update u and the
    scales. So: an fp32 weight within 2 ulps (its own last rounding, plus u's error, u being far smaller than
    the weight) + 2**-20 |u|; a bf16 weight within one bf16 ulp (the fp32 results differ by ulps, so the bf16
    rounding flips only at a tie); a scale within 2**-20 relative; a code = round(levels * (|x| / scale) ** (1/k))
    whose argument, at most 255, moves by 255 * 2**-20 = 2.4e-4, so codes differ by at most 1 and only where
    eager's argument lies within 1e-3 of a half-integer. (The C loop takes the codes' square roots to 2**-21
    relative, which moves their argument by under 2.5e-4 more: tests/test_optim_kernel.py. Within the same 1e-3.)"""
    (eager, fused), gen = compiled_pair
    for step in range(5):
        source, target = (eager, fused) if step % 2 == 0 else (fused, eager)
        buffer = io.BytesIO()  # saved and loaded, as a checkpoint is: the target gets its own tensors
        torch.save(source.state_dict(), buffer)
        target.load_state_dict(torch.load(io.BytesIO(buffer.getvalue())))
        for p, q in zip(target.param_groups[0]["params"], source.param_groups[0]["params"]):
            p.data.copy_(q.detach())
        ps_e, ps_f = eager.param_groups[0]["params"], fused.param_groups[0]["params"]
        before = [p.detach().clone() for p in ps_e]
        expected = {}
        for p, q in zip(ps_e, ps_f):
            p.grad = torch.randn(p.shape, generator=gen).to(p.dtype)
            q.grad = p.grad.clone()
            if p.numel() >= COMPILED_SETTINGS["min_quantized"]:
                expected[p] = eager_moments(eager, p, p.grad)
        eager.step()
        fused.step()
        for p, q, p0 in zip(ps_e, ps_f, before):
            a, b = p.detach().double(), q.detach().double()
            if p.dtype == torch.bfloat16:
                ulp = torch.finfo(torch.bfloat16).eps * a.abs().clamp_min(2**-126)
                assert ((a - b).abs() <= ulp).all(), f"step {step}: a bf16 weight moved by more than one ulp"
            else:
                ulp = torch.finfo(torch.float32).eps * a.abs()
                u = (a - p0.double() * (1 - COMPILED_SETTINGS["lr"] * COMPILED_SETTINGS["weight_decay"])).abs()
                assert ((a - b).abs() <= 2 * ulp + 2**-20 * u).all(), f"step {step}: {(a - b).abs().max()}"
            se, sf = eager.state[p], fused.state[q]
            assert set(se) == set(sf) and se["step"] == sf["step"]
            if p not in expected:  # fp32 moments: the same eager ops on both sides
                assert torch.equal(se["exp_avg"], sf["exp_avg"]) and torch.equal(se["exp_avg_sq"], sf["exp_avg_sq"])
                continue
            for key, code in (("exp_avg", M_CODE), ("exp_avg_sq", V_CODE)):
                scale_e, scale_f = se[f"{key}_scales"], sf[f"{key}_scales"]
                assert ((scale_e - scale_f).abs() <= 2**-20 * scale_e).all()
                codes_e, codes_f = se[f"{key}_codes"], sf[f"{key}_codes"]
                assert codes_f.dtype == code.dtype
                differ = codes_e.int() != codes_f.int()
                assert (codes_e.int() - codes_f.int()).abs().max() <= 1
                x = expected[p][f"{key}_codes"].double()
                s = scale_e.double().repeat_interleave(BLOCK)[: x.numel()]
                argument = code.levels * (x.abs() / s.clamp_min(1e-38)) ** (1 / code.power)
                assert ((argument[differ] % 1 - 0.5).abs() < 1e-3).all(), f"step {step}: {key} codes off a tie"


def test_the_compiled_step_compiles_once_per_dtype(inductor_pair):
    """Another lr, another step count, another number of blocks: no new compile (the numbers are a tensor,
    the number of blocks a dynamic size)."""
    from torch._dynamo.utils import counters

    (_, fused), gen = inductor_pair
    compiled = counters["stats"]["unique_graphs"]
    p = torch.nn.Parameter(torch.randn(7, BLOCK, generator=gen))  # 7 blocks: a size no other parameter has
    p.grad = torch.randn(p.shape, generator=gen)
    fused.add_param_group({"params": [p], "lr": 3e-3})
    for _ in range(2):
        fused.step()
    assert counters["stats"]["unique_graphs"] == compiled


def test_compile_without_a_compiler_says_so(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ValueError, match="C\\+\\+ compiler"):
        AdamW8bit([torch.nn.Parameter(torch.zeros(10))], compile=True)
