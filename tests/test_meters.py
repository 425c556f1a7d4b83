"""The meters of minigpt.memory.meters, checked against a meter that is not ours: torch.profiler's raw events.

measure() takes its moments from AllocatorMeter because the live-tensor meter, a TorchDispatchMode, changes
the step it meters (autograd sums two gradients of one tensor into a new tensor while a mode is active) and
cannot see scratch made inside an op. These tests show both effects, and that the prediction matches the
allocator's peak read with nothing of ours in the way.
"""

import contextlib

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from minigpt import memory, step
from minigpt.memory.measure import prepare_step
from minigpt.memory.meters import AllocatorMeter, LiveTensorTracker, without_profiler_log_lines
from minigpt.model import get_config

CPU = torch.device("cpu")


def profiler_peak(run) -> int:
    """Most bytes the CPU allocator had given out at once during run(), above what it held before, read from
    torch.profiler's memory events: no hook, no mark, no meter of ours."""
    with without_profiler_log_lines(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events = sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_ns())
    allocated = peak = 0
    for e in events:
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU:
            allocated += e.nbytes()
            peak = max(peak, allocated)
    return peak


def tensor_bytes(tensors) -> int:
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


# (precision, checkpointing, levers): each of the step's levers, where the prediction's peak is a moment the
# two meters disagreed on (the embedding's gradient sum, the chunked loss's 16-bit backward, master weights'
# conversion), and plain steps
PEAK_CASES = [
    ("fp32", "none", {}),
    ("fp32", "none", {"loss_chunks": 4}),
    ("bf16", "none", {}),
    ("bf16-pure", "none", {"loss_chunks": 4}),
    ("bf16", "full", {"optimizer": "adamw8bit", "optimizer_in_backward": True}),
    ("fp32", "sqrt", {"offload_activations": True}),
    ("bf16", "none", {"lora_rank": 8}),
]


@pytest.mark.parametrize("precision,mode,levers", PEAK_CASES)
def test_predicted_and_measured_peaks_are_what_the_allocator_gives_out(precision, mode, levers):
    """A plain step, run under nothing but torch.profiler, peaks where estimate() and measure() say."""
    cfg, (batch, ctx) = get_config("tiny"), (2, 32)
    state, train_cfg, xy = prepare_step(cfg, batch, ctx, precision, mode, False, CPU, 0, **levers)
    step.train_step(state, [xy], CPU, precision, train_cfg.grad_clip)  # AdamW's state exists, as from step 2 on
    model = state.model
    before = tensor_bytes([*model.parameters(), *model.buffers(), *xy])
    before += tensor_bytes(v for s in state.optimizer.state.values() for v in s.values() if torch.is_tensor(v))

    def one_step():
        offload = step.new_offloader(state, CPU)
        with offload or contextlib.nullcontext():
            step.forward_backward(model, [xy], CPU, precision, state.scaler, offload)
        step.optimizer_step(state, train_cfg.grad_clip)

    allocated = before + profiler_peak(one_step)
    predicted = memory.estimate(cfg, batch, ctx, precision, mode, device="cpu", **levers).peak
    measured = memory.measure(cfg, batch, ctx, precision, mode, **levers).peak
    # measure() reads the same allocator over the same step: the same bytes, to the byte
    assert measured == allocated
    # The prediction counts tensors; the allocator also gives out a few KiB of scratch inside kernels (oneDNN's
    # packing, reductions), which varies with the CPU. 1% of a tiny step is ~100 KiB, well above that scratch
    # and well below each effect fixed here (a (V, C) gradient is 2 MiB, 17% of these peaks).
    assert abs(predicted - allocated) / allocated < 0.01


def test_a_dispatch_mode_makes_autograd_sum_gradients_into_a_new_tensor():
    """Why the moments are not the live-tensor meter's: the tied embedding's two gradients, summed under it."""
    cfg = get_config("tiny")
    state, train_cfg, xy = prepare_step(cfg, 2, 32, "fp32", "none", False, CPU, 0, loss_chunks=4)
    model = state.model

    def embedding_moment() -> int:
        """The allocator's most bytes (above where it started) while backward is at the embedding."""
        model.zero_grad(set_to_none=True)
        meter = AllocatorMeter(CPU)

        def on_output(module, args, out) -> None:  # backward reaching the embedding's output starts the moment
            out.register_hook(lambda grad: meter.mark("emb"))

        mark = model.tok_emb.register_forward_hook(on_output)
        with meter:
            step.forward_backward(model, [xy], CPU, "fp32", state.scaler, None)
        mark.remove()
        return meter.phase_peaks(before=0)["emb"]

    embedding_moment()  # warm up (first-call caches)
    plain = embedding_moment()
    with LiveTensorTracker(list(model.parameters()), "cpu"):
        under_a_mode = embedding_moment()
    V, C, N = cfg.vocab_size, cfg.n_embd, 2 * 32
    # a third (V, C) fp32 gradient, made once the (N, C) gradient reaching the embedding is freed
    assert under_a_mode - plain == 4 * V * C - 4 * N * C


def test_the_allocator_meter_sees_scratch_made_inside_an_op():
    """add_ of a bf16 tensor into an fp32 one casts it to fp32 inside the op: no dispatch mode sees that tensor."""
    total, part = torch.zeros(256, 256), torch.ones(256, 256, dtype=torch.bfloat16)
    meter = AllocatorMeter(CPU)
    with meter:
        meter.mark("add")
        total.add_(part)
        meter.mark(None)
    assert meter.phase_peaks(before=0) == {"add": 4 * 256 * 256}  # the fp32 cast, made and freed inside add_
    tracker = LiveTensorTracker([], "cpu")
    with tracker:
        total.add_(part)
    assert tracker.records == []  # the tracker saw no new storage


def test_allocator_meter_counts_each_phase_from_what_was_there():
    meter = AllocatorMeter(CPU)
    with meter:
        meter.mark("one")
        a = torch.empty(1000, dtype=torch.uint8)
        meter.mark("two")
        b = torch.empty(3000, dtype=torch.uint8)
        del a, b
        meter.mark(None)
        torch.empty(10**6, dtype=torch.uint8)  # after mark(None): not counted
    assert meter.phase_peaks(before=500) == {"one": 1500, "two": 4500}


def test_without_allocator_events_measure_says_the_moments_are_the_tracker_s(monkeypatch):
    """Where torch.profiler records no allocations (an MPS GPU, a build without Kineto), measure() says so."""
    monkeypatch.setattr(AllocatorMeter, "available", property(lambda self: False))
    with pytest.warns(UserWarning, match="records no allocations"):
        fallback = memory.measure(get_config("tiny"), 2, 32)
    assert fallback.peak == max(fallback.moments.values()) > 0
