"""The chunked loss head (minigpt.loss): the same loss and gradients as plain cross-entropy, never (N, V) at once."""

import pytest
import torch

from minigpt import memory, step
from minigpt.cli import main
from minigpt.config import TrainConfig
from minigpt.device import check_compile
from minigpt.loss import IGNORE_INDEX, check_loss_chunks, chunked_cross_entropy, cross_entropy_fp32
from minigpt.model import GPT, get_config
from minigpt.recompute import CHECKPOINTING_MODES

FP32_EPS = torch.finfo(torch.float32).eps  # 2**-23
BF16_EPS = torch.finfo(torch.bfloat16).eps  # 2**-7


def fp32_tolerance(terms: int, grads: dict[str, torch.Tensor]) -> dict[str, float]:
    """The largest difference two fp32 computations of the same sums may show, per gradient.

    Both sides add the same per-token contributions, in another order (chunk by chunk, then the chunks'
    sums): reordering a sum of n fp32 terms moves it by at most about n * eps * sum|terms| (Higham 2002,
    "Accuracy and Stability of Numerical Algorithms", section 4.2). With `terms` per entry and each term
    at most the gradient's largest entry, that is terms * eps * max|grad|. A missing chunk or a wrong
    scale moves a gradient by a large fraction of max|grad|, far outside it.
    """
    return {name: terms * FP32_EPS * g.abs().max().item() for name, g in grads.items()}


def random_head(tokens: int = 48, C: int = 16, V: int = 50, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, tokens // 2, C, generator=gen, requires_grad=True)
    weight = (torch.randn(V, C, generator=gen) * 0.5).requires_grad_()
    targets = torch.randint(0, V, (2, tokens // 2), generator=gen)
    targets[0, :5] = IGNORE_INDEX  # padding does not count
    return hidden, weight, targets


def head_loss_and_grads(hidden, weight, targets, chunks: int, reduction: str):
    hidden, weight = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    if chunks == 1:
        loss = cross_entropy_fp32(hidden @ weight.t(), targets, reduction)
    else:
        loss = chunked_cross_entropy(hidden, weight, targets, chunks, reduction)
    loss.backward()
    return loss.detach(), {"hidden": hidden.grad, "weight": weight.grad}


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("chunks", [2, 5, 48])  # 5 does not divide 48 tokens: uneven chunks
def test_chunked_loss_and_gradients_equal_cross_entropys(chunks, reduction):
    hidden, weight, targets = random_head()
    loss, grads = head_loss_and_grads(hidden, weight, targets, 1, reduction)
    chunked_loss, chunked_grads = head_loss_and_grads(hidden, weight, targets, chunks, reduction)
    # the loss sums 48 per-token losses: the same reordering bound as the gradients'
    assert abs(chunked_loss - loss) <= 48 * FP32_EPS * loss.abs()
    # d weight sums over the 48 tokens; d hidden over the 50 vocabulary rows
    tolerance = fp32_tolerance(50, grads)
    for name in grads:
        torch.testing.assert_close(chunked_grads[name], grads[name], rtol=0, atol=tolerance[name])
    assert chunked_grads["hidden"][0, :5].abs().max() == 0  # ignored targets give no gradient at all


def test_a_chunk_left_out_would_be_caught():
    """The tolerance is tight enough to fail: dropping one token's gradient moves d weight far outside it."""
    hidden, weight, targets = random_head()
    _, grads = head_loss_and_grads(hidden, weight, targets, 1, "sum")
    short = targets.clone()
    short[1, -1] = IGNORE_INDEX
    _, wrong = head_loss_and_grads(hidden, weight, short, 4, "sum")
    assert (wrong["weight"] - grads["weight"]).abs().max() > fp32_tolerance(50, grads)["weight"]


def model_grads(cfg, x, y, chunks: int, mode: str = "none", precision: str = "fp32"):
    model = GPT(cfg)
    model.loss_chunks, model.checkpointing = chunks, mode
    with torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16"):
        logits, loss = model(x, y, reduction="sum")
    loss.backward()
    return logits, loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.fixture
def batch():
    cfg = get_config("tiny")
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, cfg.vocab_size, (2, 32), generator=gen)
    y = torch.randint(0, cfg.vocab_size, (2, 32), generator=gen)
    y[1, 20:] = IGNORE_INDEX
    return cfg, x, y


@pytest.mark.parametrize("mode", CHECKPOINTING_MODES)
def test_the_models_gradients_equal_plain_ones_in_every_checkpointing_mode(batch, mode):
    """Every parameter, the tied embedding included: its gradient from the head adds to the embedding's."""
    cfg, x, y = batch
    _, loss, grads = model_grads(cfg, x, y, 1, mode)
    logits, chunked_loss, chunked = model_grads(cfg, x, y, 4, mode)
    assert logits is None  # the whole logits never exist, so none come back
    assert abs(chunked_loss - loss) <= x.numel() * FP32_EPS * loss
    # the longest fp32 sum behind a gradient: d hidden over the vocabulary (8192 rows)
    tolerance = fp32_tolerance(cfg.vocab_size, grads)
    # tok_emb.weight is lm_head.weight: plain's gradient is the head's plus the lookup's, so equal means added
    for name in grads:
        torch.testing.assert_close(chunked[name], grads[name], rtol=0, atol=tolerance[name], msg=name)


def test_under_autocast_each_chunk_runs_in_bf16_and_its_softmax_in_fp32(batch):
    cfg, x, y = batch
    _, loss, grads = model_grads(cfg, x, y, 1, precision="bf16")
    _, chunked_loss, chunked = model_grads(cfg, x, y, 4, precision="bf16")
    # the same bf16 logits, row by row, go through an fp32 log-softmax: the losses agree at fp32's rounding
    assert abs(chunked_loss - loss) <= x.numel() * FP32_EPS * loss
    # lm_head's weight gradient: plain rounds the whole (V, C) product to bf16 once (half an eps); chunked
    # rounds each of the 4 chunks' products, then adds them in fp32: at most (4 + 1) half-eps apart
    for name, g in grads.items():
        atol = (4 + 1) * BF16_EPS / 2 * g.abs().max().item()
        torch.testing.assert_close(chunked[name], g, rtol=0, atol=atol, msg=name)


def test_token_normalization_of_accumulation_is_kept(batch):
    """forward_backward divides the summed loss by the window's tokens: two micro-batches of one, chunked."""
    cfg, x, y = batch
    device, grads = torch.device("cpu"), {}
    for chunks in (1, 3):
        state = step.build_step_state(cfg, TrainConfig(preset="tiny", loss_chunks=chunks, accum=2, batch=1), device)
        loss = step.forward_backward(state.model, [(x[:1], y[:1]), (x[1:], y[1:])], device, "fp32")
        grads[chunks] = (loss, {n: p.grad for n, p in state.model.named_parameters()})
    (loss, plain), (chunked_loss, chunked) = grads[1], grads[3]
    assert abs(chunked_loss - loss) <= x.numel() * FP32_EPS * loss
    tolerance = fp32_tolerance(cfg.vocab_size, plain)
    for name in plain:
        torch.testing.assert_close(chunked[name], plain[name], rtol=0, atol=tolerance[name], msg=name)


def test_training_with_chunks_lowers_the_loss(batch):
    cfg, x, y = batch
    device = torch.device("cpu")
    state = step.build_step_state(cfg, TrainConfig(preset="tiny", loss_chunks=4, lr=3e-3, steps=10), device)
    losses = [step.train_step(state, [(x, y)], device, "fp32")["loss"] for _ in range(10)]
    assert losses[-1] < losses[0] - 0.5  # ten steps on one batch: it learns it


def test_logits_come_back_without_chunking_and_without_targets(batch):
    """The chapters' contract: model(idx, targets) returns the logits with loss_chunks 1; model(idx) always."""
    cfg, x, y = batch
    model = GPT(cfg)
    assert model(x, y)[0].shape == (2, 32, cfg.vocab_size)
    model.loss_chunks = 4
    assert model(x)[0].shape == (2, 32, cfg.vocab_size) and model(x)[1] is None
    assert model(x, y)[0] is None


def test_the_chunked_head_never_holds_whole_logits():
    """Measured: the largest (tokens x vocabulary) bytes at once are one chunk's, as predicted."""
    cfg, batch_size, ctx, chunks = get_config("tiny"), 2, 32, 4
    measured = memory.measure(cfg, batch_size, ctx, loss_chunks=chunks)
    predicted = memory.estimate(cfg, batch_size, ctx, loss_chunks=chunks, device="cpu")
    one_chunk = 4 * cfg.vocab_size * batch_size * ctx // chunks  # fp32 (n, V): made, reduced, dropped
    assert predicted.logits == one_chunk
    assert abs(measured.logits - one_chunk) <= 16  # a 0-dim fp32 or two beside it
    plain = memory.estimate(cfg, batch_size, ctx, device="cpu")
    assert plain.logits >= 2 * chunks * predicted.logits  # logits + two fp32 gradients, whole


@pytest.mark.parametrize(
    "chunks,tokens,what", [(0, 64, "at least 1"), (-3, 64, "at least 1"), (65, 64, "at most 64"), (2.5, 64, "whole")]
)
def test_bad_loss_chunks_get_one_clear_line(chunks, tokens, what):
    with pytest.raises(ValueError, match=what):
        check_loss_chunks(chunks, tokens)


@pytest.mark.parametrize("value,what", [("0", "at least 1"), ("-2", "at least 1"), ("999999", "more chunks than")])
def test_the_cli_refuses_bad_loss_chunks(capsys, tmp_path, value, what):
    argv = ["train", "--preset", "tiny", "--batch", "2", "--ctx", "16", "--steps", "1", "--loss-chunks", value]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("minigpt train: error: --loss-chunks") and what in err and "\n" not in err
    assert not (tmp_path / "run").exists()  # refused before anything was made


def test_chunks_and_offloading_work_under_compile(batch):
    """torch.compile traces the chunked loss's autograd.Function and runs under the offloading hooks."""
    cfg, x, y = batch
    try:
        check_compile(torch.device("cpu"))
    except ValueError as err:
        pytest.skip(str(err))
    grads = {}
    for compiled in (False, True):
        levers = dict(loss_chunks=4, offload_activations=True, compile=compiled)
        state = step.build_step_state(cfg, TrainConfig(preset="tiny", **levers), torch.device("cpu"))
        offloader = step.new_offloader(state, torch.device("cpu"))
        with offloader:
            step.forward_backward(state.forward, [(x, y)], torch.device("cpu"), "fp32", None, offloader)
        grads[compiled] = {n: p.grad for n, p in state.model.named_parameters()}
    tolerance = fp32_tolerance(cfg.vocab_size, grads[False])  # generated kernels sum in another order
    for name, g in grads[False].items():
        torch.testing.assert_close(grads[True][name], g, rtol=0, atol=tolerance[name], msg=name)
