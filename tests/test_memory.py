import functools
import importlib
import json

import pytest
import torch

from minigpt import memory, step, train
from minigpt.model import count_params, get_config
from minigpt.precision import PRECISIONS, static_bytes_per_param
from minigpt.recompute import CHECKPOINTING_MODES, sqrt_segments

# The module estimate() reads its constants from (memory.estimate is the function it re-exports)
estimate_module = importlib.import_module("minigpt.memory.estimate")

# The module's target: predicted activations within 5% of measured. (With torch 2.13's CPU kernels they
# agree to the byte; 5% leaves room for another torch version saving a tensor more or less.)
ACTIVATION_TOLERANCE = 0.05
# The transient terms and the peak are predicted moment by moment; here they agree within 0.2%. 5% still
# catches a missing (N, V) logits gradient or a missing recomputed block (each 10-40% of the peak here).
PEAK_TOLERANCE = 0.05
TRANSIENTS = ("logits", "activation_grads", "weight_copies", "optimizer_step")

# (batch, ctx) per preset. "tiny" runs a whole metered step in a fraction of a second; for "10m" the tests
# meter the forward only (measure_activations: no backward, no AdamW), the grid benchmark the whole step.
SHAPES = {"tiny": (2, 32), "10m": (1, 64)}


@functools.cache
def measured(
    preset: str, precision: str, mode: str, batch: int, ctx: int, dropout: float = 0.0, master: bool = False
) -> memory.MemoryBreakdown:
    cfg = get_config(preset, dropout=dropout)
    return memory.measure(cfg, batch, ctx, precision, mode, master_weights=master)


@functools.cache
def activations(preset: str, precision: str, mode: str, batch: int, ctx: int) -> int:
    """Measured activations: from a whole step for "tiny", from the forward alone for the others."""
    if preset == "tiny":
        return measured(preset, precision, mode, batch, ctx).activations
    return memory.measure_activations(get_config(preset), batch, ctx, precision, mode)


def predicted(
    preset: str, precision: str, mode: str, batch: int, ctx: int, dropout: float = 0.0, master: bool = False
) -> memory.MemoryBreakdown:
    cfg = get_config(preset, dropout=dropout)
    return memory.estimate(cfg, batch, ctx, precision, mode, master_weights=master, device="cpu")


def rel_error(pred: int, meas: int) -> float:
    return abs(pred - meas) / meas


@pytest.mark.parametrize("precision,master", [(p, False) for p in PRECISIONS] + [("bf16-pure", True)])
def test_static_terms_are_exact_for_every_precision(precision, master):
    meas = measured("tiny", precision, "none", *SHAPES["tiny"], master=master)
    pred = predicted("tiny", precision, "none", *SHAPES["tiny"], master=master)
    per_param = static_bytes_per_param(precision, master_weights=master)
    n = count_params(get_config("tiny"))  # the tied embedding is one matrix: counted once
    assert meas.weights == pred.weights == n * (per_param["weights"] + per_param["master_weights"])
    assert meas.gradients == pred.gradients == n * per_param["grads"]
    assert meas.optimizer == pred.optimizer == n * per_param["optimizer"]
    assert meas.static == n * per_param["total"]


@pytest.mark.parametrize("mode", CHECKPOINTING_MODES)
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("preset", SHAPES)
def test_predicted_activations_within_5_percent_of_measured(preset, precision, mode):
    pred = predicted(preset, precision, mode, *SHAPES[preset]).activations
    assert rel_error(pred, activations(preset, precision, mode, *SHAPES[preset])) <= ACTIVATION_TOLERANCE


@pytest.mark.parametrize("precision,mode", [("fp32", "none"), ("bf16", "selective"), ("bf16-pure", "sqrt")])
def test_a_forward_alone_measures_the_same_activations_as_a_step(precision, mode):
    step = measured("tiny", precision, mode, *SHAPES["tiny"]).activations
    assert memory.measure_activations(get_config("tiny"), *SHAPES["tiny"], precision, mode) == step


@pytest.mark.parametrize("mode", CHECKPOINTING_MODES)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_saved_tensor_hooks_see_everything_but_the_selective_cache(precision, mode):
    """Checkpoint's own saved inputs go through the outer hooks; selective's kept op outputs do not."""
    meas = measured("tiny", precision, mode, *SHAPES["tiny"])
    if mode != "selective":
        assert meas.saved_by_hooks == meas.activations
    else:
        rows = memory.activation_table(get_config("tiny"), *SHAPES["tiny"], precision, "selective", "cpu")
        cache = sum(r["bytes"] for r in rows if r["part"] == "each block" and "input" not in r["tensor"])
        assert meas.activations - meas.saved_by_hooks == cache


@pytest.mark.parametrize("mode", ["none", "selective"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "bf16-pure"])
def test_dropout_adds_what_the_formula_says(precision, mode):
    """On a CPU: masks in the input's dtype, and attention falls back to a math path with T x T tensors."""
    args = ("tiny", precision, mode, *SHAPES["tiny"])
    with_dropout, without = measured(*args, dropout=0.1).activations, measured(*args).activations
    pred_with, pred_without = predicted(*args, dropout=0.1).activations, predicted(*args).activations
    assert rel_error(pred_with, with_dropout) <= ACTIVATION_TOLERANCE
    added, pred_added = with_dropout - without, pred_with - pred_without
    assert added > 0 and rel_error(pred_added, added) <= ACTIVATION_TOLERANCE


@pytest.mark.parametrize("lora", [False, True], ids=["full training", "LoRA"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("batch", [1, 2])
def test_the_attention_math_path_is_predicted_to_the_byte_at_any_batch(batch, precision, lora):
    """CPU attention with dropout: at a batch of 1 in fp32 its reshape of v is a view, so v's view keeps all of qkv's
    output (3C) instead of a copy of v (C); in 16 bits q, k, v are fp32 copies at any batch. Both estimators."""
    cfg = get_config("tiny", dropout=0.1)
    kw = dict(lora_rank=4, lora_targets="all", train_embedding=True) if lora else {}
    meas = memory.measure(cfg, batch, 32, precision, "none", **kw)
    pred = memory.estimate(cfg, batch, 32, precision, "none", device="cpu", **kw)
    assert pred.activations == meas.activations


@pytest.mark.parametrize("mode", ["none", "full"])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("preset", ["tiny", "tiny-deep"])
def test_the_loss_heads_backward_is_predicted_at_any_batch_and_depth(preset, batch, mode):
    """Two moments of the loss head's backward under autocast, each the worst somewhere:
    - lm_head's 16-bit weight gradient is cast to fp32 after the logits' gradient and the weight's copy are freed
      (at a batch of 1 the cast outweighs cross-entropy's two fp32 gradients; counting the logits' gradient beside
      it over-predicted by one (N, V) 16-bit tensor, 4% of tiny's peak);
    - the phase begins as the model's forward returns, when autocast's cache still holds every weight copy and
      the logits are alive: with full checkpointing on a deep model that is the worst (under-predicted by the
      copies before, 7% on 10m).
    Within 1% of the moment (measured: 8 bytes without checkpointing)."""
    cfg = get_config(preset)
    meas = memory.measure(cfg, batch, 32, "bf16", mode)
    pred = memory.estimate(cfg, batch, 32, "bf16", mode, device="cpu")
    moment = "backward: loss head"
    assert abs(pred.moments[moment] - meas.moments[moment]) <= 0.01 * meas.moments[moment]


def test_dropout_masks_on_cuda_are_one_byte_per_value():
    """CUDA's fused dropout keeps a bool mask; its fused attention keeps a seed and an offset, not T x T."""
    batch, ctx = 2, 128
    cfg, cfg_dropout = get_config("10m"), get_config("10m", dropout=0.1)
    for precision in PRECISIONS:
        plain = memory.estimate(cfg, batch, ctx, precision, device="cuda").activations
        dropped = memory.estimate(cfg_dropout, batch, ctx, precision, device="cuda").activations
        # a mask after attention and after the MLP in each block, one after the embedding; 16 bytes of RNG
        assert dropped - plain == (2 * cfg.n_layer + 1) * batch * ctx * cfg.n_embd + cfg.n_layer * 16


def test_cuda_peak_counts_cublas_workspaces_and_fp32_attention_needs_no_transpose_copy(monkeypatch):
    """Two CUDA-only rules measured on an H100 (benchmarks/cuda/RESULTS.md), checked here without a GPU."""
    cfg, batch, ctx = get_config("tiny"), 2, 64
    with_workspace = memory.estimate(cfg, batch, ctx, "bf16", device="cuda")
    monkeypatch.setattr(estimate_module, "CUDA_LIBRARY_WORKSPACE", 0)
    without = memory.estimate(cfg, batch, ctx, "bf16", device="cuda")
    # every moment of the step holds cuBLAS's two workspaces (the loop's thread and autograd's)
    assert {k: v - without.moments[k] for k, v in with_workspace.moments.items()} == {
        k: 2 * 32 * 2**20 for k in without.moments
    }

    # fp32 on CUDA: the attention output is already (B, T, heads, head_dim), so proj reads it without a copy
    # of its own; in 16 bits (cuDNN/flash kernels on an H100) and on the CPU the copy is there.
    def copy_rows(precision: str, device: str) -> int:
        rows = memory.activation_table(cfg, batch, ctx, precision, "none", device)
        return sum(r["bytes"] for r in rows if r["tensor"].startswith("proj input"))

    assert copy_rows("fp32", "cuda") == 0
    assert copy_rows("fp32", "cpu") == copy_rows("bf16", "cuda") * 2 == 4 * batch * ctx * cfg.n_embd * cfg.n_layer


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_activations_scale_linearly_with_batch(precision):
    """A straight line in batch: the same bytes for each added sequence, plus a batch-independent part."""
    ctx = 32
    acts = [measured("tiny", precision, "none", batch, ctx).activations for batch in (1, 2, 3)]
    assert acts[2] - acts[1] == acts[1] - acts[0]
    rows = memory.activation_table(get_config("tiny"), 1, ctx, precision, device="cpu")
    per_sequence = sum(r["count"] * r["per_token"] * ctx for r in rows)
    fixed = sum(r["count"] * r["fixed"] for r in rows)  # the loss normalizer; RoPE tables under autocast
    assert acts[1] - acts[0] == per_sequence
    assert acts[0] == per_sequence + fixed


@pytest.mark.parametrize("precision", ["fp32", "bf16-pure"])
@pytest.mark.parametrize("preset", SHAPES)
def test_checkpointing_modes_order_the_saved_bytes_as_the_formulas_predict(preset, precision):
    shape, n_layer = SHAPES[preset], get_config(preset).n_layer
    by_measure = sorted(CHECKPOINTING_MODES, key=lambda m: activations(preset, precision, m, *shape))
    by_formula = sorted(CHECKPOINTING_MODES, key=lambda m: predicted(preset, precision, m, *shape).activations)
    assert by_measure == by_formula
    assert by_formula[-1] == "none"  # every mode keeps less than none
    # sqrt keeps one input per segment, full one per block: with fewer segments than blocks, sqrt keeps less
    if len(sqrt_segments(n_layer)) < n_layer:
        assert by_formula.index("sqrt") < by_formula.index("full")


MASTER_CASES = [("bf16-pure", "none", True), ("bf16-pure", "sqrt", True)]


@pytest.mark.parametrize(
    "precision,mode,master", [(p, m, False) for p in PRECISIONS for m in CHECKPOINTING_MODES] + MASTER_CASES
)
def test_predicted_peak_and_transients_match_the_measured_step(precision, mode, master):
    meas = measured("tiny", precision, mode, *SHAPES["tiny"], master=master)
    pred = predicted("tiny", precision, mode, *SHAPES["tiny"], master=master)
    assert set(pred.moments) == set(meas.moments)
    for moment in pred.moments:
        assert rel_error(pred.moments[moment], meas.moments[moment]) <= PEAK_TOLERANCE, moment
    assert rel_error(pred.peak, meas.peak) <= PEAK_TOLERANCE
    for name in TRANSIENTS:
        pred_value, meas_value = getattr(pred, name), getattr(meas, name)
        assert pred_value == meas_value == 0 or rel_error(pred_value, meas_value) <= PEAK_TOLERANCE, name
    assert pred.peak <= pred.upper_bound  # no moment holds more than "every term at once"


def test_measure_meters_the_step_train_itself_runs(monkeypatch):
    """measure() runs step.forward_backward and step.optimizer_step (with the TrainConfig's grad_clip),
    not a copy of them: what train's step holds during AdamW's step shows in the measured numbers, in the
    metered step's terms and in the moments of the step it runs again under the allocator's meter."""
    plain = measured("tiny", "fp32", "none", *SHAPES["tiny"])
    calls, real_forward_backward, real_optimizer_step = [], step.forward_backward, step.optimizer_step
    scratch_bytes = 2**20

    def forward_backward(*args, **kwargs):
        calls.append("forward_backward")
        return real_forward_backward(*args, **kwargs)

    def optimizer_step(state, grad_clip):
        calls.append(("optimizer_step", grad_clip))
        scratch = torch.empty(scratch_bytes, dtype=torch.uint8)  # held across AdamW's step
        result = real_optimizer_step(state, grad_clip)
        del scratch
        return result

    monkeypatch.setattr(step, "forward_backward", forward_backward)
    monkeypatch.setattr(step, "optimizer_step", optimizer_step)
    with_scratch = memory.measure(get_config("tiny"), *SHAPES["tiny"])
    # once metered, once more under the allocator's meter alone (its moments)
    assert calls == 2 * ["forward_backward", ("optimizer_step", train.TrainConfig().grad_clip)]
    assert with_scratch.optimizer_step - plain.optimizer_step == scratch_bytes
    assert with_scratch.moments["optimizer"] - plain.moments["optimizer"] == scratch_bytes
    assert (with_scratch.activations, with_scratch.gradients) == (plain.activations, plain.gradients)


def test_weight_copies_are_an_autocast_cost_only():
    cfg = get_config("tiny")
    matrices = count_params(cfg) - (2 * cfg.n_layer + 1) * cfg.n_embd  # all but the RMSNorm gains
    for precision in PRECISIONS:
        expected = 2 * matrices if precision in ("bf16", "fp16") else 0
        # with checkpointing too: autocast's cache keeps every copy until the forward ends
        assert measured("tiny", precision, "full", *SHAPES["tiny"]).weight_copies == expected


def test_activation_table_adds_up_and_the_per_layer_formulas():
    cfg = get_config("10m")
    C, H, h = cfg.n_embd, cfg.mlp_hidden, cfg.n_head
    assert memory.layer_bytes_per_token(cfg, "fp32", "cpu") == 52 * C + 16 * H + 8 + 4 * h
    # CUDA's fp32 attention writes its output as (B, T, heads, head_dim): no transposed copy of 4 C
    assert memory.layer_bytes_per_token(cfg, "fp32", "cuda") == 48 * C + 16 * H + 8 + 4 * h
    assert memory.layer_bytes_per_token(cfg, "bf16", "cpu") == 36 * C + 8 * H + 8 + 4 * h
    assert memory.layer_bytes_per_token(cfg, "bf16-pure", "cpu") == 30 * C + 8 * H + 8 + 4 * h
    for mode in CHECKPOINTING_MODES:
        rows = memory.activation_table(cfg, 2, 128, "bf16", mode)
        assert sum(r["bytes"] for r in rows) == memory.estimate(cfg, 2, 128, "bf16", mode).activations


def test_rope_tables_are_cast_for_q_and_again_for_k_under_autocast():
    cfg, ctx = get_config("tiny"), 32
    (rope,) = [r for r in memory.activation_table(cfg, 1, ctx, "bf16") if r["tensor"].startswith("RoPE")]
    assert rope["fixed"] == 4 * ctx * (cfg.head_dim // 2) * 2 and rope["count"] == cfg.n_layer
    for precision in ("fp32", "bf16-pure"):  # the saved tables are the model's own buffers
        rows = memory.activation_table(cfg, 1, ctx, precision)
        assert not any(r["tensor"].startswith("RoPE") for r in rows)


def test_textbook_formulas_give_their_numbers():
    cfg, batch, ctx = get_config("125m"), 4, 1024
    B, T, C, L, a = batch, ctx, cfg.n_embd, cfg.n_layer, cfg.n_head
    assert memory.activations_rule_of_thumb(cfg, batch, ctx) == B * T * C * L * 10 * 4
    assert memory.activations_rule_of_thumb(cfg, batch, ctx, bytes_per_value=2) == B * T * C * L * 10 * 2
    expected = L * T * B * C * (34 + 5 * a * T / C)  # s*b*h*(34 + 5as/h) per layer
    assert memory.activations_korthikanti(cfg, batch, ctx) == pytest.approx(expected, rel=1e-12)


def test_static_table_rows():
    rows = {r["regime"]: r for r in memory.static_table()}
    totals = [rows[k]["total"] for k in ("fp32", "bf16", "fp16", "bf16-pure", "bf16-pure + master")]
    assert totals == [16, 16, 16, 8, 18]
    framing = rows["'12 + 2 = 14' framing"]
    assert framing["total"] == framing["weights"] + framing["master_weights"] + framing["optimizer"] == 14
    assert framing["grads"] == 0  # what the framing forgets: add fp32 gradients and it is our 18
    assert framing["total"] + static_bytes_per_param("bf16-pure", True)["grads"] == totals[-1]


def test_breakdown_rows_and_json():
    b = memory.estimate(get_config("tiny"), 2, 32, "bf16")
    rows = dict(b.rows())
    assert rows["static"] == b.weights + b.gradients + b.optimizer
    assert rows["peak"] == b.peak == max(b.moments.values())
    assert json.loads(json.dumps(b.to_dict()))["peak"] == b.peak


@pytest.mark.parametrize(
    "call,what",
    [
        (lambda: memory.estimate(get_config("tiny"), 1, 32, checkpointing="half"), "checkpointing"),
        (lambda: memory.estimate(get_config("tiny"), 1, 65), "ctx"),
        (lambda: memory.estimate(get_config("tiny"), 0, 32), "batch"),
        (lambda: memory.estimate(get_config("tiny"), 1, 32, precision="fp8"), "precision"),
        (lambda: memory.estimate(get_config("tiny"), 1, 32, precision="fp32", master_weights=True), "master"),
        (lambda: memory.measure(get_config("tiny"), 1, 99), "ctx"),
        (lambda: memory.memory_timeline("out.png", get_config("tiny"), 1, 8), "html"),
    ],
)
def test_bad_input_gets_a_clear_error(call, what):
    with pytest.raises(ValueError, match=what):
        call()


def test_memory_timeline_on_cpu(tmp_path):
    path = memory.memory_timeline(tmp_path / "timeline.json", get_config("tiny"), 1, 16, steps=1)
    if path is None:
        pytest.skip("this torch build cannot export a memory timeline (a warning said why)")
    times, sizes = json.loads(path.read_text())
    assert len(times) == len(sizes) > 0
    assert max(sum(s) for s in sizes) > count_params(get_config("tiny")) * 4  # at least the fp32 weights


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given where there is no GPU")
def test_memory_snapshot_without_cuda_says_what_to_use():
    with pytest.raises(RuntimeError, match="memory_timeline"):
        memory.memory_snapshot("snap.pickle", get_config("tiny"), 1, 16, device="cpu")


# ------------------------------------------------------------------------------------------------------------
# Static memory per process under --shard (measured on real processes in test_distributed.py)


@pytest.mark.parametrize("preset", ["tiny", "10m"])
def test_parameter_shapes_are_the_models_in_its_order(preset):
    from minigpt.memory.static_state import parameter_shapes
    from minigpt.model import GPT

    cfg = get_config(preset)
    assert parameter_shapes(cfg) == [tuple(p.shape) for p in GPT(cfg).parameters()]


@pytest.mark.parametrize("precision, master", [("fp32", False), ("bf16", False), ("bf16-pure", True)])
def test_sharded_state_bytes_follow_the_zero_formulas(precision, master):
    """none: 16P on every process; zero1: optimizer / N; fsdp: everything / N (125m: no parameter dominates)."""
    cfg, n = get_config("125m"), 4
    whole = memory.estimate(cfg, 1, 16, precision, master_weights=master)
    none = memory.sharded_state_bytes(cfg, precision, "none", n, master_weights=master)
    assert none == {"weights": whole.weights, "gradients": whole.gradients, "optimizer": whole.optimizer}
    for shard in ("zero1", "fsdp"):  # one process splits nothing
        assert memory.sharded_state_bytes(cfg, precision, shard, 1, master_weights=master) == none
    zero1 = memory.sharded_state_bytes(cfg, precision, "zero1", n, master_weights=master)
    assert zero1["weights"] == none["weights"] and zero1["gradients"] == none["gradients"]
    # whole parameters go to processes, so the split is only about even: the largest share within 5% of 1/N
    assert none["optimizer"] / n <= zero1["optimizer"] < 1.05 * none["optimizer"] / n
    fsdp = memory.sharded_state_bytes(cfg, precision, "fsdp", n, master_weights=master)
    for key, value in fsdp.items():  # 4 divides every dim 0 of 125m: no padding, exactly 1/N
        assert value * n == none[key]


def test_sharded_state_bytes_counts_uneven_splits():
    """3 processes: FSDP's last shard of a dim 0 that 3 does not divide is shorter; ZeRO-1 never splits a parameter."""
    from minigpt.memory.static_state import fsdp_shard_params, zero1_partition
    from minigpt.model import ModelConfig

    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=36, ctx=16, vocab_size=1001)  # 1001 = 3 x 333 + 2
    shards = fsdp_shard_params(cfg, 3)
    assert sum(shards) == count_params(cfg) and shards[0] == max(shards) > shards[-1]
    assert zero1_partition(cfg, 3)[0] >= 1001 * 36  # the embedding, whole, on one process
    assert sum(zero1_partition(cfg, 3)) == count_params(cfg)


def test_sharded_state_bytes_rejects_bad_input():
    cfg = get_config("tiny")
    with pytest.raises(ValueError, match="--shard"):
        memory.sharded_state_bytes(cfg, "fp32", "zero3", 2)
    with pytest.raises(ValueError, match="at least 1"):
        memory.sharded_state_bytes(cfg, "fp32", "fsdp", 0)
    with pytest.raises(ValueError, match="rank"):
        memory.sharded_state_bytes(cfg, "fp32", "fsdp", 2, rank=2)


@pytest.mark.parametrize("shard", ["zero1", "fsdp"])
def test_sharded_estimate_moves_every_moment_with_the_split_state(shard):
    """Weights and AdamW's state live through the whole step: every moment loses what splitting them saves."""
    cfg, n = get_config("30m"), 4
    whole = memory.estimate(cfg, 2, 128, "bf16")
    assert memory.sharded_estimate(whole, cfg, "bf16", shard, 1) is whole  # one process: nothing split
    split = memory.sharded_estimate(whole, cfg, "bf16", shard, n)
    per = memory.sharded_state_bytes(cfg, "bf16", shard, n)
    assert (split.weights, split.gradients, split.optimizer) == (per["weights"], per["gradients"], per["optimizer"])
    saved = whole.static - split.static
    assert split.moments["optimizer"] == whole.moments["optimizer"] - saved
    if shard == "zero1":  # nothing is gathered, the gradients stay whole: the other moments lose AdamW's share
        for phase, live in split.moments.items():
            if phase != "optimizer":
                assert live == whole.moments[phase] - (whole.optimizer - split.optimizer)
    assert split.peak < whole.peak and split.activations == whole.activations


@pytest.mark.parametrize("mode", CHECKPOINTING_MODES)
def test_fsdp_with_bf16_makes_no_autocast_copies_and_an_unknown_mode_errs_safe(mode):
    """bf16 gathers (MixedPrecisionPolicy) leave autocast nothing to copy; without the mode, no moment is lower."""
    cfg, n = get_config("30m"), 4
    whole = memory.estimate(cfg, 2, 128, "bf16", checkpointing=mode)
    known = memory.sharded_estimate(whole, cfg, "bf16", "fsdp", n, checkpointing=mode)
    unknown = memory.sharded_estimate(whole, cfg, "bf16", "fsdp", n)
    assert whole.weight_copies > 0 and known.weight_copies == unknown.weight_copies == 0
    assert all(unknown.moments[phase] >= live for phase, live in known.moments.items())
    assert known.moments["forward"] == unknown.moments["forward"]  # every copy goes, whatever the mode
    assert known.peak < whole.peak
    fp32 = memory.estimate(cfg, 2, 128, "fp32", checkpointing=mode)  # no policy: no copies, whatever the mode
    without_mode = memory.sharded_estimate(fp32, cfg, "fp32", "fsdp", n)
    assert without_mode == memory.sharded_estimate(fp32, cfg, "fp32", "fsdp", n, checkpointing=mode)


# ------------------------------------------------------------------------------------------------------------
# The optimizer levers: AdamW8bit's state (--optimizer adamw8bit) and the step in backward (--optimizer-in-backward)

LEVERS = {
    "8-bit": dict(optimizer="adamw8bit"),
    "in backward": dict(optimizer_in_backward=True),
    "both": dict(optimizer="adamw8bit", optimizer_in_backward=True),
}
# Issue 25: the measured step agrees with the prediction within 1% on each lever alone and on both combined
LEVER_TOLERANCE = 0.01
# (precision, checkpointing, master weights) for tiny; the step in backward refuses fp16 (config.check_optimizer)
LEVER_CASES = [("fp32", "none", False), ("bf16", "full", False), ("bf16-pure", "selective", False)]
LEVER_CASES += [("bf16-pure", "sqrt", True), ("fp16", "none", False)]


@functools.cache
def with_levers(side: str, preset: str, precision: str, mode: str, master: bool, lever: str | None):
    """estimate() ("predicted") or measure() ("measured") of SHAPES[preset], with LEVERS[lever] (None: AdamW)."""
    levers = LEVERS[lever] if lever else {}
    args = (get_config(preset), *SHAPES[preset], precision, mode)
    if side == "predicted":
        return memory.estimate(*args, master_weights=master, device="cpu", **levers)
    return memory.measure(*args, master_weights=master, **levers)


def lever_cases(preset: str) -> list[tuple]:
    cases = LEVER_CASES if preset == "tiny" else [("fp32", "none", False)]  # a 10m step takes seconds
    return [
        (preset, *case, lever)
        for case in cases
        for lever in LEVERS
        if not (case[0] == "fp16" and LEVERS[lever].get("optimizer_in_backward"))
    ]


@pytest.mark.parametrize("preset,precision,mode,master,lever", lever_cases("tiny") + lever_cases("10m"))
def test_optimizer_levers_are_predicted_to_the_byte_and_measured_within_1_percent(
    preset, precision, mode, master, lever
):
    pred = with_levers("predicted", preset, precision, mode, master, lever)
    meas = with_levers("measured", preset, precision, mode, master, lever)
    # the terms the levers change, to the byte: the state (codes, scales, fp32 moments of the small tensors),
    # the gradients (in backward: the most alive at once), and the update's temporaries
    for term in ("weights", "gradients", "optimizer", "optimizer_step"):
        assert getattr(pred, term) == getattr(meas, term), term
    assert rel_error(pred.peak, meas.peak) <= LEVER_TOLERANCE
    # the moments where the levers act (the end of backward, the step) within 1%: a missing gradient or a
    # whole-model one too many would be 20-60% there; the others as the existing terms are held
    for moment in pred.moments:
        tolerance = LEVER_TOLERANCE if moment in ("backward: embedding", "optimizer") else PEAK_TOLERANCE
        assert rel_error(pred.moments[moment], meas.moments[moment]) <= tolerance, moment


def test_each_lever_shows_as_the_term_it_changes():
    """8-bit: the moments go from 8 bytes a parameter to about 2; in backward: the gradients from the whole
    model's to the largest single one (the tied embedding), gone from the end of backward and the step."""
    from minigpt.memory.optimizer_state import largest_param

    cfg, n = get_config("tiny"), count_params(get_config("tiny"))
    plain = with_levers("measured", "tiny", "fp32", "none", False, None)
    eight = with_levers("measured", "tiny", "fp32", "none", False, "8-bit")
    assert plain.optimizer == 8 * n and 2 * n < eight.optimizer < 2.1 * n  # + 8 bytes a block, + fp32 gains
    in_backward = with_levers("measured", "tiny", "fp32", "none", False, "in backward")
    assert plain.gradients == 4 * n and in_backward.gradients == 4 * largest_param(cfg) == 4 * cfg.vocab_size * 64
    for side in ("predicted", "measured"):
        before = with_levers(side, "tiny", "fp32", "none", False, None).moments
        after = with_levers(side, "tiny", "fp32", "none", False, "in backward").moments
        # at the step: no gradient left at all (a few bytes of the grad norm aside)
        assert before["optimizer"] - after["optimizer"] >= 4 * n - 16
        # at the end of backward: every gradient but the embedding's is gone
        assert before["backward: embedding"] - after["backward: embedding"] >= 4 * (n - largest_param(cfg)) - 16
        assert after["backward: loss head"] == before["backward: loss head"]  # no gradient exists there yet


def test_125m_8bit_state_brings_the_peak_to_the_target():
    """Issue 25's target, predicted on this machine's rules (the CPU's; CUDA adds cuBLAS's 64 MiB of workspaces):
    125m, batch 8 x 1024, bf16, full checkpointing: at most 2,060 MiB with 8-bit moments, which take about a
    quarter of AdamW's 912 MiB; every moment holds the moments, so the peak drops by what they save."""
    cfg, mib = get_config("125m"), 2**20
    plain = memory.estimate(cfg, 8, 1024, "bf16", "full", device="cpu")
    eight = memory.estimate(cfg, 8, 1024, "bf16", "full", device="cpu", optimizer="adamw8bit")
    assert round(plain.optimizer / mib) == 912 and 228 * mib < eight.optimizer < 235 * mib
    assert eight.peak <= 2060 * mib
    # (the peak is not at the optimizer step); AdamW8bit's step counters are Python ints, not 4-byte tensors
    counters = 4 * (2 + 7 * cfg.n_layer)  # one per parameter tensor: the embedding, the final norm, 7 a block
    assert plain.peak - eight.peak == plain.optimizer - eight.optimizer + counters


def test_the_optimizer_levers_refuse_what_cannot_work_in_the_estimate_too():
    with pytest.raises(ValueError, match="--precision fp16: the GradScaler"):
        memory.estimate(get_config("tiny"), 1, 32, "fp16", optimizer_in_backward=True)
    with pytest.raises(ValueError, match="choose one of: adamw, adamw8bit"):
        memory.estimate(get_config("tiny"), 1, 32, optimizer="sgd")


# ------------------------------------------------------------------------------------------------------------
# The loss head in chunks and activation offloading (issue 26): each alone, both, and with the 8-bit AdamW and
# the step in backward (all four memory levers of that round). The prediction against the measured step.

HEAD_AND_OFFLOAD_LEVERS = {
    "chunks": dict(loss_chunks=4),
    "offload": dict(offload_activations=True),
    "both": dict(loss_chunks=4, offload_activations=True),
    "all four": dict(loss_chunks=4, offload_activations=True, optimizer="adamw8bit", optimizer_in_backward=True),
}
HEAD_AND_OFFLOAD_CASES = {"tiny": [("fp32", "none"), ("bf16", "full"), ("bf16-pure", "sqrt"), ("fp32", "selective")]}
HEAD_AND_OFFLOAD_CASES["10m"] = [("bf16", "full")]  # the benchmark's baseline (a whole step of 10m takes seconds)


@pytest.mark.parametrize("levers", HEAD_AND_OFFLOAD_LEVERS)
@pytest.mark.parametrize(
    "preset,precision,mode", [(p, *case) for p, cases in HEAD_AND_OFFLOAD_CASES.items() for case in cases]
)
def test_loss_chunks_and_offloading_are_predicted_within_1_percent(preset, precision, mode, levers):
    """The peak and the terms within 1%, what leaves the device to the byte, each moment within PEAK_TOLERANCE."""
    cfg, shape, kw = get_config(preset), SHAPES[preset], HEAD_AND_OFFLOAD_LEVERS[levers]
    meas = memory.measure(cfg, *shape, precision, mode, **kw)
    pred = memory.estimate(cfg, *shape, precision, mode, device="cpu", **kw)
    assert rel_error(pred.peak, meas.peak) <= 0.01
    assert pred.offloaded == meas.offloaded  # None without offloading
    for name in ("activations", "logits", "activation_grads", "weight_copies", "gradients", "optimizer"):
        value, measured_value = getattr(pred, name), getattr(meas, name)
        assert value == measured_value == 0 or rel_error(value, measured_value) <= 0.01, name
    for moment, live in meas.moments.items():
        if moment == "backward: blocks" and "offload_activations" in kw and mode == "none":
            # an upper bound there (memory/offloaded.py, region_reload): autograd reads a block back node by node
            assert rel_error(pred.moments[moment], live) <= 0.06
        else:
            # 10m in bf16 with full checkpointing (make bench's baseline, which holds 125m to 2%): the moments
            # within 1%. Before the final norm's backward and the embedding's were moments of their own,
            # "backward: blocks" counted an (N, C) fp32 gradient too many (+2.0% with all four levers), and
            # "forward" missed the residual stream the model held through the loss head (-2.1% offloaded).
            # Left at PEAK_TOLERANCE: the loss head's backward with offloading, whose read-back of the
            # log-softmax is an upper bound (memory/offloaded.py, head_reloads; +1.4% at this shape)
            exact = preset == "10m" and not (moment == "backward: loss head" and "offload_activations" in kw)
            tolerance = 0.01 if exact else PEAK_TOLERANCE
            assert rel_error(pred.moments[moment], live) <= tolerance, moment


def test_all_four_levers_on_10m_every_moment_within_half_a_percent():
    """make bench's all-four row, scaled down: 10m, bf16, full checkpointing, 4 x 256 tokens (about 3 s).

    Tokens enough for an (N, C) fp32 tensor to be 1.2% of a moment: the estimate once counted the residual
    stream's gradient at the final norm's backward inside a recomputed block (+1.4% at "backward: blocks") and
    beside the embedding's summed gradient (+1.2%). What is left: +0.4%, the recomputed block's MLP moment.
    """
    cfg, kw = get_config("10m"), HEAD_AND_OFFLOAD_LEVERS["all four"]
    meas = memory.measure(cfg, 4, 256, "bf16", "full", **kw)
    pred = memory.estimate(cfg, 4, 256, "bf16", "full", device="cpu", **kw)
    for moment, live in meas.moments.items():
        assert rel_error(pred.moments[moment], live) <= 0.005, moment


def test_each_head_and_offload_lever_shows_as_the_terms_it_changes():
    """minigpt memory's rows: chunking shrinks `logits` and the log-softmax activation; offloading moves activations."""
    cfg, shape = get_config("10m"), (8, 256)
    plain = memory.estimate(cfg, *shape, "bf16", "full", device="cpu")
    chunked = memory.estimate(cfg, *shape, "bf16", "full", device="cpu", loss_chunks=8)
    moved = memory.estimate(cfg, *shape, "bf16", "full", device="cpu", offload_activations=True)
    tokens, V = shape[0] * shape[1], cfg.vocab_size
    assert plain.logits == 2 * 4 * tokens * V  # cross-entropy's two fp32 (N, V) gradients at once
    assert chunked.logits == (2 + 4) * tokens * V // 8  # one chunk's bf16 logits and their fp32 upcast
    assert plain.activations - chunked.activations == 4 * V * tokens + 4 - 4 * tokens  # log-softmax -> log-sum-exp
    assert moved.activations + moved.offloaded == plain.activations and plain.offloaded is None
    assert moved.activations < 0.001 * plain.activations  # what stays: token ids, targets, 1/rms, one normalizer


def test_the_allocator_meter_counts_only_its_own_gpu():
    """The profiler records the allocations of every GPU in the process: a meter of cuda:0 counts cuda:0's."""
    from types import SimpleNamespace

    from minigpt.memory import meters
    from minigpt.memory.meters import AllocatorMeter

    def event(name, nbytes=0, index=0, start=0):
        kind = torch.autograd.DeviceType.CUDA
        return SimpleNamespace(
            name=lambda: name, nbytes=lambda: nbytes, device_index=lambda: index, device_type=lambda: kind,
            start_ns=lambda: start,
        )  # fmt: skip

    meter = AllocatorMeter(torch.device("cuda:0"))
    mark = event(meters._PHASE_MARK + "forward", start=0)
    events = [mark, event("[memory]", 100, index=0, start=1), event("[memory]", 5000, index=1, start=2)]
    meter._profiler = SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events)))
    assert meter.phase_peaks(before=0) == {"forward": 100}
