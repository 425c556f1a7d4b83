import math

import pytest
import torch

from minigpt.model import (
    COURSE_PRESETS,
    GPT,
    IGNORE_INDEX,
    PRESETS,
    SAMPLE_WINDOW_STEP,
    ModelConfig,
    count_params,
    get_config,
)
from minigpt.tokenizer import get_tokenizer, padded_vocab_size


def test_forward_shapes(tiny_cfg):
    model = GPT(tiny_cfg)
    idx = torch.randint(0, tiny_cfg.vocab_size, (3, 10))
    logits, loss = model(idx)
    assert logits.shape == (3, 10, tiny_cfg.vocab_size)
    assert loss is None
    _, loss = model(idx, idx)
    assert loss.shape == () and loss.dtype == torch.float32


def test_causal_future_tokens_do_not_change_past_logits(tiny_cfg):
    model = GPT(tiny_cfg).eval()
    idx = torch.randint(0, tiny_cfg.vocab_size, (1, 12))
    changed = idx.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % tiny_cfg.vocab_size
    a, _ = model(idx)
    b, _ = model(changed)
    # positions 0..7 see only tokens 0..7, which are equal: identical up to float noise
    torch.testing.assert_close(a[0, :8], b[0, :8], rtol=0, atol=1e-6)
    assert not torch.allclose(a[0, 8:], b[0, 8:])  # and the changed positions do change


def test_untrained_loss_is_near_ln_vocab():
    # With 0.02-std init the logits are near zero, so the predicted distribution is near uniform.
    cfg = get_config("tiny")
    model = GPT(cfg)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, cfg.vocab_size, (4, 32), generator=g)
    targets = torch.randint(0, cfg.vocab_size, (4, 32), generator=g)  # unrelated to the inputs
    _, loss = model(idx, targets)
    # Logits have std ~0.16 at init, which raises the loss above ln(V) by about var/2 = 0.013 nats.
    assert abs(loss.item() - math.log(cfg.vocab_size)) < 0.05


def test_ignore_index_targets_do_not_count(tiny_cfg):
    model = GPT(tiny_cfg)
    idx = torch.randint(0, tiny_cfg.vocab_size, (2, 8))
    targets = idx.clone()
    targets[:, 4:] = IGNORE_INDEX
    _, full_sum = model(idx[:, :4], targets[:, :4], reduction="sum")
    _, masked_sum = model(idx, targets, reduction="sum")
    # causal: the first 4 positions' logits are the same in both calls, and only they are counted
    torch.testing.assert_close(masked_sum, full_sum, rtol=1e-5, atol=1e-5)


def test_tied_embeddings_and_param_count_formula():
    for name, cfg in PRESETS.items():
        if name == "125m":
            continue  # built below only by formula: allocating it takes a few seconds
        model = GPT(cfg)
        assert model.lm_head.weight is model.tok_emb.weight
        assert model.num_params() == count_params(cfg), name


@pytest.mark.parametrize("preset", COURSE_PRESETS)
def test_preset_param_counts_match_their_names(preset):
    # The default tokenizer's vocabulary, padded to a multiple of 64, is what the presets use.
    assert PRESETS[preset].vocab_size == padded_vocab_size(get_tokenizer())
    target = {"10m": 10e6, "30m": 30e6, "125m": 125e6}[preset]
    assert abs(count_params(PRESETS[preset]) - target) / target <= 0.10


def test_init_is_deterministic_from_the_seed(tiny_cfg):
    torch.manual_seed(123)
    a = GPT(tiny_cfg, seed=1)
    torch.manual_seed(456)  # the global RNG does not matter: init draws from its own generator
    b, c = GPT(tiny_cfg, seed=1), GPT(tiny_cfg, seed=2)
    for (n, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), n
        if not n.endswith("norm.weight"):
            assert not torch.equal(pa, pc), n


def test_generate_greedy_and_sampling(tiny_cfg):
    model = GPT(tiny_cfg)
    idx = torch.zeros(2, 3, dtype=torch.long)
    out = model.generate(idx, 20, temperature=0)  # longer than ctx=16: the window slides
    assert out.shape == (2, 23) and torch.equal(out[:, :3], idx)
    assert torch.equal(out, model.generate(idx, 20, temperature=0))  # greedy is deterministic
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    s1 = model.generate(idx, 10, temperature=1.0, top_k=5, generator=gen())
    s2 = model.generate(idx, 10, temperature=1.0, top_k=5, generator=gen())
    assert torch.equal(s1, s2)
    with pytest.raises(ValueError, match="temperature"):
        model.generate(idx, 1, temperature=-1)


def test_generate_pads_its_window_to_a_few_lengths_and_writes_what_the_unpadded_loop_writes():
    # ctx 160, not a multiple of SAMPLE_WINDOW_STEP (64): windows of 64, 128, then ctx, whatever the token count
    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=32, ctx=160, vocab_size=64)
    model = GPT(cfg)
    with torch.no_grad():  # at init a model repeats one token; 4x its weights, its greedy text uses 41 of 64 tokens,
        for p in model.parameters():  # so reading any position but the window's last real one shows in the text
            p.mul_(4)
    lengths = []
    hook = model.register_forward_pre_hook(lambda module, args: lengths.append(args[0].shape[1]))
    idx = torch.randint(0, cfg.vocab_size, (1, 5), generator=torch.Generator().manual_seed(0))
    out = model.generate(idx, 200, temperature=0)
    hook.remove()
    assert len(lengths) == 200 and set(lengths) == {SAMPLE_WINDOW_STEP, 2 * SAMPLE_WINDOW_STEP, cfg.ctx}
    assert model.training  # generate leaves the mode as it found it
    expected = idx  # greedy without padding: each step reads the last position of the window itself
    with torch.no_grad():
        model.eval()
        for _ in range(200):
            logits, _ = model(expected[:, -cfg.ctx :])
            expected = torch.cat([expected, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    # the padding changes which rows the matmuls hold, not what the last real row attends to: the same argmax
    # (the two largest logits of a step differ by 1.6e-3 or more here, fp32 rounding by about 1e-6)
    assert torch.equal(out, expected)


def test_top_k_one_is_greedy(tiny_cfg):
    model = GPT(tiny_cfg)
    idx = torch.zeros(1, 2, dtype=torch.long)
    assert torch.equal(model.generate(idx, 8, temperature=1.0, top_k=1), model.generate(idx, 8, temperature=0))


def test_bad_configs_are_clear_errors():
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(n_embd=30, n_head=4)
    with pytest.raises(ValueError, match="unknown preset"):
        get_config("7b")
    with pytest.raises(ValueError, match="dropout"):
        ModelConfig(dropout=1.5)


def test_sequence_longer_than_ctx_is_rejected(tiny_cfg):
    model = GPT(tiny_cfg)
    with pytest.raises(ValueError, match="ctx"):
        model(torch.zeros(1, tiny_cfg.ctx + 1, dtype=torch.long))
