"""Write chapters/02_memory_anatomy.ipynb (without outputs) from the cells below.

Run it, then execute the notebook in place to store the outputs:
    python scripts/chapters/build_ch02.py
    OMP_NUM_THREADS=1 jupyter nbconvert --to notebook --execute --inplace chapters/02_memory_anatomy.ipynb
    pytest --nbval chapters/02_memory_anatomy.ipynb -q -p no:cacheprovider
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "chapters" / "02_memory_anatomy.ipynb"
CELLS: list[nbformat.NotebookNode] = []


def md(text: str, slide: str = "-") -> None:
    cell = nbformat.v4.new_markdown_cell(text.strip("\n"))
    cell.metadata = {"slideshow": {"slide_type": slide}}
    CELLS.append(cell)


def code(source: str, slide: str = "-", tags: tuple[str, ...] = ()) -> None:
    cell = nbformat.v4.new_code_cell(source.strip("\n"))
    cell.metadata = {"slideshow": {"slide_type": slide}}
    if tags:
        cell.metadata["tags"] = list(tags)
    CELLS.append(cell)


IGNORE = ("nbval-ignore-output",)

# ----------------------------------------------------------------------------------------------------------
# Title, setup

md(r"""
# Chapter 2: The Anatomy of Training Memory

[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/minigpt-course/minigpt-course/blob/main/chapters/02_memory_anatomy.ipynb)

A model that loads fine can still run out of memory the moment it trains. Training keeps much more than the
weights: a gradient for every weight, the optimizer's running averages, and every intermediate tensor the
backward pass will need. This chapter takes one training step apart, byte by byte. Each cost is first
predicted from the model's shape, then measured on real tensors, so that by the end you can say, before
launching a run, where its memory will go and which lever moves which part.

**What you will learn**

- The four costs of a training step (weights, gradients, optimizer state, activations), with the parameter
  counts of the course's 10m, 30m and 125m models computed from their shapes.
- Static memory in bytes per parameter for each training regime: 16 for fp32 and for autocast, 18 for pure
  bf16 with an fp32 master copy, 8 for pure bf16, and what the "12 + 2" framing forgets. Then the
  arithmetic for 1B, 7B and 70B models: how many 80 GB GPUs before a single activation.
- What autograd saves for backward, tensor by tensor; our formula next to the rule of thumb
  B·T·C·L·10 and Korthikanti et al.'s sbh(34 + 5as/h); all three checked against a meter that counts the
  saved tensors of a real forward pass.
- The breakdown of a step for each preset, and why the peak is not the sum of the parts.
- How activations grow with the batch (linearly) and with the sequence length, with fused attention and
  with a naive attention that stores the s x s scores (the quadratic term).
- A calculator with sliders, and a profiler timeline of real training steps: the forward spike, the
  backward, and the optimizer state that appears after the first step.
- Four mistakes made when measuring or holding memory, each run live.

**Prerequisites**

[Chapter 1](../chapters/01_number_formats.ipynb) (bytes per value of fp32, bf16 and fp16). A PyTorch training
step: forward, `loss.backward()`, `optimizer.step()`. Everything measured here runs in fp32 on the CPU at the
"small" scale.
""", "slide")

code(r'''
# On Colab this installs the course package; anywhere else it does nothing.
import sys
if "google.colab" in sys.modules:
    !pip install -q "minigpt-course @ git+https://github.com/minigpt-course/minigpt-course"
''', "skip", ("setup",))

code(r'''
SCALE = "small"   # "small": about a minute on a laptop CPU (what CI runs); "full": real sizes, for a GPU
''', "skip", ("parameters",))

code(r'''
import json
import math
import tempfile
from pathlib import Path
from unittest.mock import patch

import matplotlib.pyplot as plt
import numpy as np
import torch
from tabulate import tabulate

import minigpt.device
from minigpt import memory
from minigpt.checkpointing import CHECKPOINTING_MODES
from minigpt.model import COURSE_PRESETS, GPT, PRESETS, CausalSelfAttention, ModelConfig, apply_rope, count_params
from minigpt.model import get_config
from minigpt.plan import GB, GIB
from minigpt.precision import static_bytes_per_param

SIZES = {
    # Measurements on the 10m model with 2 sequences of 64 tokens; sweeps up to 8 sequences and 512 tokens;
    # the profiler on the tiny model. About a minute on one CPU thread.
    "small": {"batch": 2, "ctx": 64, "batches": (1, 2, 4, 8), "ctx_sweep": (64, 128, 256, 512),
              "timeline_preset": "tiny", "timeline_batch": 4, "timeline_ctx": 64},
    # GPU sizes: the 10m model at its full context, longer sequences, the profiler on the 10m model.
    "full": {"batch": 8, "ctx": 256, "batches": (1, 2, 4, 8, 16, 32), "ctx_sweep": (256, 512, 1024, 2048, 4096),
             "timeline_preset": "10m", "timeline_batch": 8, "timeline_ctx": 256},
}[SCALE]
# "small" stays on the CPU, where every byte count is exact and the same on every machine; "full" takes the GPU.
DEVICE = minigpt.device.pick_device() if SCALE == "full" else torch.device("cpu")
if DEVICE.type == "cpu":
    torch.set_num_threads(1)  # these sizes gain little from more threads
MEASURED = get_config("10m")   # the model every measurement uses
TYPICAL_BATCH = 8              # "a typical setting": 8 sequences at the preset's full context
MIB = 2**20
print(f"SCALE={SCALE}, DEVICE={DEVICE}, sizes={SIZES}")
''', "skip")

code(r'''
from minigpt.device import doctor_rows

print(tabulate(doctor_rows(), headers=["what", "value"], tablefmt="github"))
''', "skip", IGNORE)

code(r'''
def batch_of_tokens(batch: int, ctx: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids (inputs, targets) of shape (batch, ctx) on DEVICE: memory does not care about the text."""
    tokens = torch.randint(0, MEASURED.vocab_size, (batch, ctx + 1), generator=torch.Generator().manual_seed(seed))
    return tokens[:, :-1].to(DEVICE), tokens[:, 1:].to(DEVICE)


def saved_bytes(meter: memory.SavedTensorMeter) -> int:
    """What the storages autograd has saved, and that are still alive, add up to."""
    return sum(meter.alive().values())
''', "skip")

# ----------------------------------------------------------------------------------------------------------
# 1. The four costs

md(r"""
## 1. The four costs

While a model trains, four kinds of data share the device's memory:

| cost | what it is | how big |
|---|---|---|
| **weights** | the parameters themselves | bytes per value x parameters |
| **gradients** | one `.grad` per parameter, filled by `backward()` | the same again |
| **optimizer state** | AdamW's two running averages per parameter | twice the weights, in fp32 |
| **activations** | the tensors the forward pass keeps for the backward pass | grows with batch x sequence length |

The first three depend only on the number of parameters: we call them **static memory**. The fourth
depends on how much data one step pushes through the model, and it is usually the one that runs out.
Around them come short-lived buffers (the logits and their gradients, scratch space inside backward), which
matter for the peak (section 4).

**Question:** how many parameters do the course's three models have, and where are they?
""", "slide")

code(r'''
rows = []
for name in COURSE_PRESETS:
    cfg = PRESETS[name]
    C, H, V, L = cfg.n_embd, cfg.mlp_hidden, cfg.vocab_size, cfg.n_layer
    embedding = V * C                              # tied: the output head is the same matrix
    per_block = 4 * C * C + 3 * C * H + 2 * C      # qkv + proj, gate + up + down, two RMSNorm gains
    total = count_params(cfg)
    assert total == embedding + L * per_block + C  # + the final norm's gain
    rows.append([name, L, C, H, embedding, per_block, L * per_block, total, embedding / total])
print(tabulate(rows, headers=["preset", "layers L", "width C", "MLP hidden H", "embedding V x C",
                              "per block", "all blocks", "total", "embedding share"],
               tablefmt="github", intfmt=",", floatfmt=".0%"))
''')

code(r'''
built = GPT(MEASURED)
print(f"GPT(10m) built: {built.num_params():,} parameters; count_params from the config: "
      f"{count_params(MEASURED):,}; equal: {built.num_params() == count_params(MEASURED)}")
del built
''')

md(r"""
Each block holds about `12 C²` parameters (4 C² in attention, 3 x C x 8/3 C in the SwiGLU MLP), so the
blocks grow with the square of the width. The vocabulary of 8192 tokens is small, but with narrow models
the embedding is still a large share: the last column. Because input and output embeddings are *tied*,
that matrix is stored, updated and counted once.
""", "fragment")

md(r"""
**Question:** for each preset, at a typical setting of 8 sequences at its full context in fp32, how big is
each of the four costs? `memory.estimate` computes them from the config alone, without building the model.
""", "subslide")

code(r'''
rows = []
for name in COURSE_PRESETS:
    cfg = PRESETS[name]
    b = memory.estimate(cfg, TYPICAL_BATCH, cfg.ctx, "fp32", device="cuda")
    rows.append([name, f"{TYPICAL_BATCH} x {cfg.ctx}", b.weights / GIB, b.gradients / GIB, b.optimizer / GIB,
                 b.activations / GIB, b.optimizer / count_params(cfg),
                 b.activations / (b.static + b.activations)])
print(tabulate(rows, headers=["preset", "batch x ctx", "weights GiB", "gradients GiB", "AdamW state GiB",
                              "activations GiB", "AdamW bytes/param", "activations share"],
               tablefmt="github", floatfmt=("", "", ".3f", ".3f", ".3f", ".3f", ".0f", ".0%")))
''')

md(r"""
Weights, gradients and AdamW's state stand in the ratio 4 : 4 : 8: sixteen bytes per parameter in fp32.
At this setting the activations are the largest of the four for every preset (last column), and unlike the
other three they would double with a batch twice as large. That is why the rest of this chapter spends most
of its time on them.
""", "fragment")

# ----------------------------------------------------------------------------------------------------------
# 2. Static memory

md(r"""
## 2. Static memory: bytes per parameter

The static part is a number of bytes per parameter that depends only on the training regime: in which
format the weights, the gradients and the optimizer's moments are stored. `memory.static_table()` lists the
regimes this course uses (from `minigpt.precision`).
""", "slide")

code(r'''
print(tabulate(memory.static_table(), headers="keys", tablefmt="github"))
''')

md(r"""
Reading the totals:

- **16 (fp32)**: 4 for the weight, 4 for its gradient, 4 + 4 for AdamW's two moments (Rajbhandari et al.,
  2020, use the same count).
- **16 again with autocast (bf16 or fp16)**: the weights stay fp32 and autocast makes 16-bit copies per
  matmul, on the fly. Autocast shrinks the *activations* (chapter 3), not the static memory.
- **18 (bf16-pure + master)**: the model holds bf16 weights (2), and the optimizer updates an fp32 master copy
  (4) with fp32 gradients (4) and fp32 moments (8). More than plain fp32.
- **8 (bf16-pure)**: everything in bf16. Half the memory, but small updates are lost when added to bf16
  weights (chapter 1's lost updates).

A common framing says mixed precision costs "12 + 2 = 14" bytes per parameter: fp32 master weights and
Adam's moments (12) plus a bf16 copy for compute (2). **Question:** what does it leave out?
""", "fragment")

code(r'''
framing = next(r for r in memory.static_table() if r["regime"].startswith("'12 + 2"))
master = static_bytes_per_param("bf16-pure", master_weights=True)
print(f"'12 + 2': master copy {framing['master_weights']} + Adam moments {framing['optimizer']} = "
      f"{framing['master_weights'] + framing['optimizer']}, + bf16 copy {framing['weights']} = {framing['total']}")
print(f"  gradients counted: {framing['grads']} bytes")
print(f"  + fp32 gradients ({master['grads']} bytes): {framing['total'] + master['grads']} "
      f"= our 'bf16-pure + master' row ({master['total']})")
print(f"  + bf16 gradients (2 bytes): {framing['total'] + 2} "
      f"= fp32 training's {static_bytes_per_param('fp32')['total']}")
''')

md(r"""
The framing forgets the gradients: every trained parameter gets one, in fp32 or in bf16, so mixed precision
with a master copy costs 16 to 18 bytes per parameter, never 14. Mixed precision does not save static
memory; it saves activations and time.
""", "fragment")

md(r"""
### 1B, 7B, 70B: how many 80 GB GPUs?

"A 7B model in mixed precision needs about 112 GB for weights, gradients and optimizer state, before a single
activation," says one of this course's sources, and an H100 has 80 GB. **Question:** what do 1B, 7B and
70B parameters need, in each regime, and how many 80 GB GPUs does that take? GPUs are sold in GB (10^9
bytes), so this table uses GB. "Split evenly" means the static state divided across GPUs with nothing
repeated, which is what ZeRO stage 3 and FSDP do (chapter 7); plain data parallelism repeats it on every GPU.
""", "subslide")

code(r'''
CARD = 80 * GB
REGIMES = {"fp32 or autocast": static_bytes_per_param("bf16")["total"],
           "bf16-pure + master": static_bytes_per_param("bf16-pure", master_weights=True)["total"],
           "bf16-pure": static_bytes_per_param("bf16-pure")["total"]}
MODELS = {"1B": 1e9, "7B": 7e9, "70B": 70e9}
rows = [[model] + [f"{n * per / GB:,.0f} GB -> {math.ceil(n * per / CARD)} GPU(s)" for per in REGIMES.values()]
        for model, n in MODELS.items()]
print(tabulate(rows, headers=["model"] + [f"{r} ({b} B/param)" for r, b in REGIMES.items()], tablefmt="github"))

seven = MODELS["7B"] * REGIMES["fp32 or autocast"]
print(f"\n7B at {REGIMES['fp32 or autocast']} B/param: {seven / GB:.0f} GB, {seven / CARD:.2f} x an 80 GB GPU: "
      f"it fits on none, and needs at least {math.ceil(seven / CARD)} with the state split evenly.")
print(f"The largest model whose static state fits one 80 GB GPU at {REGIMES['fp32 or autocast']} B/param: "
      f"{CARD / REGIMES['fp32 or autocast'] / 1e9:.1f}B parameters, with nothing left for activations.")
''')

md(r"""
The arithmetic is only multiplication, yet it settles a lot: at 16 bytes per parameter, a 7B model does not
fit on any single 80 GB GPU even before its activations, and a 70B model needs over a dozen of them just to
hold its state. Halving the bytes (pure bf16) halves the GPUs, at the cost of lost updates. Chapter 7 shows
how ZeRO and FSDP split this state, and what 8-bit optimizers and LoRA change.
""", "fragment")

# ----------------------------------------------------------------------------------------------------------
# 3. Activations

md(r"""
## 3. Activations: what autograd keeps for backward

Backward applies the chain rule, and most local derivatives need values from the forward pass: a linear
layer `y = x W` needs `x` to compute the gradient of `W`; `silu(x)` needs `x`; a product `a * b` needs both
factors. Autograd therefore *saves* these tensors during the forward pass and frees them once backward has
used them. Those saved tensors are the activations.

**Question:** what exactly does one block of our model save? `memory.activation_table` lists every saved
tensor, read from the model's code, with its size per token (C = n_embd, H = mlp_hidden, h = n_head).
""", "slide")

code(r'''
cfg = MEASURED
C, H, h, V = cfg.n_embd, cfg.mlp_hidden, cfg.n_head, cfg.vocab_size
table = memory.activation_table(cfg, 1, cfg.ctx, "fp32", device="cpu")  # the CPU's kernels, as measured here
block = [r for r in table if r["part"] == "each block"]
print(tabulate([[r["tensor"], r["per_token"], f"{r['per_token'] / (4 * C):.2f}"] for r in block],
               headers=["saved by one block (10m, fp32)", "bytes per token", "in fp32 tensors of width C"],
               tablefmt="github"))
per_layer = memory.layer_bytes_per_token(cfg, "fp32", device="cpu")
assert per_layer == sum(r["per_token"] for r in block) == 52 * C + 16 * H + 8 + 4 * h
print(f"\none block: {per_layer:,} bytes per token = 52 C + 16 H + 8 + 4 h  (C={C}, H={H}, h={h})")
''')

md(r"""
Three things make a block keep more than one might guess. The SwiGLU MLP saves four tensors of width H,
which is 8/3 of C. RMSNorm works in fp32 and keeps both its input and the normalized result. And the qkv
output stays whole even though attention only saves `v` from it, because `v` is a *view*: a view keeps its
whole storage alive. What attention does *not* keep is the T x T score matrix: the fused
`scaled_dot_product_attention` saves only its output and one log-sum-exp per head and token.
""", "fragment")

md(r"""
**Question:** and outside the blocks?
""", "subslide")

code(r'''
outside = [r for r in table if r["part"] == "outside the blocks"]
print(tabulate([[r["tensor"], r["per_token"], r["fixed"]] for r in outside],
               headers=["saved outside the blocks (10m, fp32)", "bytes per token", "bytes in all"],
               tablefmt="github"))
head = sum(r["per_token"] for r in outside)
assert head == 12 * C + 4 * V + 20
print(f"\noutside the blocks: {head:,} bytes per token = 12 C + 4 V + 20, of which the log-softmax is 4 V = "
      f"{4 * V:,}: {4 * V / per_layer:.1f} x a whole block of this model")
''')

md(r"""
The loss keeps the log-softmax over the whole vocabulary, in fp32, for every token: 4V bytes per token. For
a narrow model with an 8192-token vocabulary that one tensor is bigger than an entire block (the ratio
above). Putting it together, one fp32 training step keeps

$$\text{activations} \approx B\,T\,\big[\,L\,(52C + 16H + 8 + 4h) + 12C + 4V + 20\,\big] \text{ bytes}.$$

In bf16 autocast the matmul inputs and outputs shrink to 2 bytes while the norms and the residual stream stay
fp32: 36C + 8H + 8 + 4h per block (the docstring of `minigpt/memory.py` lists every precision).
""", "fragment")

md(r"""
### Three formulas side by side

Two formulas circulate for the same quantity:

- **The rule of thumb** (one of this course's sources): activations ≈ B · T · C · L · ~10, "about ten tensors
  of width C saved per layer per token". Its table writes the unit as bytes, but its own worked example
  multiplies by 4 more: ten *values* per layer and token, 4 bytes each in fp32.
- **Korthikanti et al. (2022)**: s·b·h·(34 + 5as/h) bytes per layer, with s the sequence length, b the
  batch, h the hidden width and a the number of heads. It describes a GPT-3 block with 16-bit activations:
  LayerNorm, a 4h GELU MLP, dropout masks of one byte, and attention that stores the a·s·s scores (softmax 2
  bytes + dropout mask 1 + dropped scores 2 = the 5as/h term).

**Question:** does the rule of thumb reproduce its source's example (a 24-layer, 512-wide model, 4 sequences
of 1024 tokens, fp32: "~2 GB")? And what does our table say for the same shape?
""", "subslide")

code(r'''
mega = ModelConfig(n_layer=24, n_head=8, n_embd=512, ctx=1024)
rule = memory.activations_rule_of_thumb(mega, 4, 1024, bytes_per_value=4)
ours = memory.estimate(mega, 4, 1024, "fp32", device="cpu").activations
print(f"rule of thumb: 4 x 1024 x 512 x 24 x 10 x 4 bytes = {rule / GB:.2f} GB")
print(f"our table for the same shape (SwiGLU, RMSNorm, our 8192-token vocabulary): {ours / GB:.2f} GB, "
      f"{ours / rule:.1f} x the rule")
''')

md(r"""
**Question:** per layer and per token, how do the three compare on our presets? For a fair match,
Korthikanti's 16-bit count sits next to our bf16 autocast count, and the rule's ten values at 4 and at 2
bytes next to our fp32 and bf16 counts. The last column drops the 5as/h term, as a fused attention kernel
does.
""", "subslide")

code(r'''
rows = []
for name in COURSE_PRESETS:
    cfg = PRESETS[name]
    s, c, a = cfg.ctx, cfg.n_embd, cfg.n_head
    korthikanti = memory.activations_korthikanti(cfg, 1, s) // (cfg.n_layer * s)  # bytes per token per layer
    rows.append([name, s, memory.layer_bytes_per_token(cfg, "fp32", "cpu"), 10 * c * 4,
                 memory.layer_bytes_per_token(cfg, "bf16", "cpu"), 10 * c * 2, korthikanti, 34 * c])
print(tabulate(rows, headers=["preset", "s", "ours fp32", "rule x 4 B", "ours bf16", "rule x 2 B",
                              "Korthikanti 34h + 5as", "Korthikanti 34h (no scores)"],
               tablefmt="github", intfmt=","))
print("bytes per token per layer; ours from memory.layer_bytes_per_token (the CPU's kernels)")
''')

md(r"""
What the columns show:

- **The rule of thumb undercounts our blocks** by a wide factor: ten tensors of width C miss the four
  SwiGLU tensors of width 8/3 C, the fp32 copies the norms keep, and q and k saved a second time after RoPE.
- **Korthikanti's count grows with s** through 5as, the stored attention scores. At the 125m model's 1024
  tokens that term alone is larger than everything else in the block. Our model uses fused attention, which
  never stores the scores; without the term (last column) his count falls *below* ours in bf16, mostly
  because of the SwiGLU tensors and our fp32 norms.
- None of the per-layer formulas sees the **vocabulary term** outside the blocks (4V bytes per token), and
  for the 10m model that is more than a whole block.

A formula is only as good as its match to the code that runs. So: measure.
""", "fragment")

md(r"""
### Measuring what autograd saves: the saved-tensor meter

PyTorch lets you intercept every tensor autograd saves: inside `torch.autograd.graph.saved_tensors_hooks(pack,
unpack)`, each saved tensor is passed to `pack` during the forward pass (and what `pack` returned to `unpack`
in backward). `memory.SavedTensorMeter` is such a pair of hooks. Its `pack` records the tensor's *storage*
(so views of one storage count once, at the storage's full size), skips the model's parameters and
buffers (they exist anyway), and keeps a weak reference, so that `alive()` reports only what is still held.

**Question:** does one block of the 10m model save what the table says? We feed a block a random input that
requires grad, as the output of the layer below would.
""", "subslide")

code(r'''
model = GPT(MEASURED).to(DEVICE)
B, T = SIZES["batch"], SIZES["ctx"]
x = torch.randn(B, T, MEASURED.n_embd, device=DEVICE, requires_grad=True)
meter = memory.SavedTensorMeter(model)  # leaves out the model's parameters and buffers
with meter:
    out = model.blocks[0](x, model.rope_cos, model.rope_sin)  # keep the output: it holds the graph
measured_block = saved_bytes(meter)
predicted_block = memory.layer_bytes_per_token(MEASURED, "fp32", DEVICE.type) * B * T
print(f"one block, {B} x {T} tokens: measured {measured_block:,} bytes, table {predicted_block:,} bytes, "
      f"ratio {measured_block / predicted_block:.4f}")
assert abs(measured_block / predicted_block - 1) < 0.05
del out, x
''', tags=IGNORE)

md(r"""
**Question:** and a whole training forward pass (embedding, blocks, head and loss)? `memory.measure_activations`
builds the model, runs the forward pass as the training loop does, and counts what is kept for backward with
the same meter.
""", "fragment")

code(r'''
rows = []
for batch, ctx in [(1, SIZES["ctx"]), (SIZES["batch"], SIZES["ctx"] // 2), (SIZES["batch"], SIZES["ctx"])]:
    measured = memory.measure_activations(MEASURED, batch, ctx, "fp32", device=DEVICE)
    predicted = memory.estimate(MEASURED, batch, ctx, "fp32", device=DEVICE.type).activations
    rule = memory.activations_rule_of_thumb(MEASURED, batch, ctx, bytes_per_value=4)
    rows.append([f"{batch} x {ctx}", measured / MIB, predicted / MIB, measured / predicted, rule / MIB])
    assert abs(measured / predicted - 1) < 0.05, (batch, ctx, measured, predicted)
print(tabulate(rows, headers=["10m, batch x ctx", "measured MiB", "our table MiB", "measured / table",
                              "rule of thumb MiB"], tablefmt="github", floatfmt=("", ".2f", ".2f", ".4f", ".2f")))
''', tags=IGNORE)

md(r"""
The table matches the meter (the ratio column; the cell asserts it is within 5%), while the rule of thumb
misses by the factor seen above. From here on, `memory.estimate`'s activations can be trusted for this model,
including at sizes too big to run here.
""", "fragment")

# ----------------------------------------------------------------------------------------------------------
# 4. The breakdown

md(r"""
## 4. The breakdown of one step

**Question:** how do the four costs stack up for each preset at the typical setting, in fp32 and with bf16
autocast? The diamond marks the predicted **peak** of the step, which section 4.1 explains.
""", "slide")

code(r'''
PARTS = [("weights", "tab:green"), ("gradients", "tab:blue"), ("optimizer", "goldenrod"), ("activations", "tab:red")]
bars = [(f"{name}\n{precision}", memory.estimate(PRESETS[name], TYPICAL_BATCH, PRESETS[name].ctx, precision,
                                                 device="cuda"))
        for name in COURSE_PRESETS for precision in ("fp32", "bf16")]
fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
for ax, share in zip(axes, (False, True)):
    for i, (label, b) in enumerate(bars):
        total, bottom = b.static + b.activations, 0.0
        for part, color in PARTS:
            value = getattr(b, part) / (total / 100 if share else GIB)
            ax.bar(i, value, bottom=bottom, color=color, label=part if i == 0 else None)
            bottom += value
        if not share:
            ax.plot(i, b.peak / GIB, "kD", label="predicted peak" if i == 0 else None)
    ax.set_xticks(range(len(bars)), [label for label, _ in bars])
    ax.set_ylabel("share of the four costs (%)" if share else "memory (GiB)")
    ax.set_title("shares" if share else f"{TYPICAL_BATCH} sequences at each preset's full context")
axes[0].legend()
fig.suptitle("The four costs of one training step, predicted by memory.estimate")
fig.tight_layout()
plt.show()
''')

md(r"""
The static part (green, blue, gold) is the same in fp32 and in bf16 autocast: 16 bytes per parameter
either way. Autocast shrinks only the red part, the activations, and at this setting the activations are
most of every bar. The bigger the model and its context, the larger their share.
""", "fragment")

md(r"""
### 4.1 The peak is not the sum

The four costs do not all peak at once. Activations are largest at the end of the forward pass; backward
then frees them block by block while the gradients fill up; the optimizer step needs the gradients and
the state but no activations. Around them come transient buffers, the largest being the logits: B x T x V
values, upcast to fp32 for the loss, and their fp32 gradients at the start of backward.

**Question:** does a real training step of the 10m model match the prediction, term by term and moment
by moment? `memory.measure` runs one step (forward, backward, clipping, AdamW) and counts live tensors op
by op.
""", "subslide")

code(r'''
B, T = SIZES["batch"], SIZES["ctx"]
measured = memory.measure(MEASURED, B, T, "fp32", device=DEVICE)
predicted = memory.estimate(MEASURED, B, T, "fp32", device=DEVICE.type)
m_rows, p_rows = dict(measured.rows()), dict(predicted.rows())
names = [k for k, _ in predicted.rows() if k not in ("weight_copies",)]
print(f"10m, {B} x {T} tokens, fp32, on {DEVICE.type}")
print(tabulate([[k, m_rows[k] / MIB, p_rows[k] / MIB, m_rows[k] / p_rows[k] if p_rows[k] else float("nan")]
                for k in names], headers=["term", "measured MiB", "predicted MiB", "ratio"],
               tablefmt="github", floatfmt=("", ".2f", ".2f", ".3f")))
assert measured.static == predicted.static  # to the byte
worst = lambda b: max(b.moments, key=b.moments.get)  # noqa: E731 - the phase where the step peaks
typical = memory.estimate(MEASURED, TYPICAL_BATCH, MEASURED.ctx, "fp32", device=DEVICE.type)
print(f"\nthe step peaks at '{worst(measured)}' (measured) and '{worst(predicted)}' (predicted); "
      f"at the typical {TYPICAL_BATCH} x {MEASURED.ctx} the prediction puts it at '{worst(typical)}'")
assert abs(measured.activations / predicted.activations - 1) < 0.05
''', tags=IGNORE)

md(r"""
The static terms agree to the byte and the activations within the meter's 5%. The rows "at ..." are the
largest amount of memory alive in each phase of the step; the peak is the largest of them, not the sum of
the terms above. Two moments compete, and the last printed line says which wins where. Early in backward,
at the loss head, every activation is still alive, the logits are held, and cross-entropy's fp32
gradients over the vocabulary appear on top: with many tokens per step, that is the peak. At the very end
of backward, the tied embedding receives two V x C gradients (one as the output head, one as the input
embedding) and their sum, next to all the other gradients: with few tokens per step, that can be the peak
instead. AdamW's state is counted in every phase because it exists from the second step on (section 7
shows it appear).
""", "fragment")

# ----------------------------------------------------------------------------------------------------------
# 5. Scaling

md(r"""
## 5. How activations grow

### 5.1 With the batch

**Question:** if one sequence costs X bytes of activations, do eight cost 8X? The meter measures the
training forward of the 10m model at several batch sizes, next to the prediction and to the static memory.
""", "slide")

code(r'''
ctx = SIZES["ctx"]
batches = SIZES["batches"]
by_batch = {b: memory.measure_activations(MEASURED, b, ctx, "fp32", device=DEVICE) for b in batches}
predicted_by_batch = {b: memory.estimate(MEASURED, b, ctx, "fp32", device=DEVICE.type).activations for b in batches}
per_sequence = by_batch[1]
rows = [[b, by_batch[b] / MIB, predicted_by_batch[b] / MIB, by_batch[b] / per_sequence] for b in batches]
print(tabulate(rows, headers=["batch", "measured MiB", "predicted MiB", "measured / one sequence"],
               tablefmt="github", floatfmt=("", ".2f", ".2f", ".3f")))
for b in batches:
    assert abs(by_batch[b] / (b * per_sequence) - 1) < 0.01  # linear: b sequences cost b times one
    assert abs(by_batch[b] / predicted_by_batch[b] - 1) < 0.05
static = memory.estimate(MEASURED, 1, ctx, "fp32", device=DEVICE.type).static
print(f"static memory {static / MIB:.2f} MiB = the activations of {static / per_sequence:.1f} sequences "
      f"of {ctx} tokens")
''', tags=IGNORE)

code(r'''
fig, ax = plt.subplots(figsize=(8, 4))
ax.plot(batches, [by_batch[b] / MIB for b in batches], "o", ms=8, label="activations, measured (saved-tensor meter)")
ax.plot(batches, [predicted_by_batch[b] / MIB for b in batches], "-", label="activations, memory.estimate")
ax.axhline(static / MIB, color="gray", ls="--", label="static: weights + gradients + AdamW (fp32)")
ax.set_xlabel(f"batch (sequences of {ctx} tokens)")
ax.set_ylabel("memory (MiB)")
ax.set_title("10m model: activations grow linearly with the batch, static memory does not")
ax.legend()
plt.show()
''', "subslide")

md(r"""
A straight line through the origin: every sequence in the batch keeps its own copy of every saved tensor,
so b sequences cost b times one (the cell asserts it to 1%). Static memory does not move. Where the
activation line meets the dashed one (the number of sequences printed under the table), activations become
the larger cost, and beyond it they are all that grows. Chapter 5's gradient accumulation exploits the
straight line: a smaller micro-batch cuts activations in proportion.
""", "fragment")

md(r"""
### 5.2 With the sequence length, and the quadratic term

Attention compares every token with every earlier one: for each head it forms a T x T matrix of scores. A
straightforward implementation computes `softmax(q kᵀ / √d) v`, and autograd saves the softmax output, T
values per head and token, for backward. That term grows with T², and it is Korthikanti's 5as/h.
`F.scaled_dot_product_attention`, which our model calls, fuses the whole computation: it saves only the
output and a log-sum-exp per head and token, and recomputes the scores in backward.

To see the difference, here is the naive attention, written to replace our model's attention forward:
""", "slide")

code(r'''
def naive_attention(self: CausalSelfAttention, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """CausalSelfAttention.forward with the attention written out: it stores the T x T probabilities."""
    B, T, C = x.shape
    q, k, v = self.qkv(x).view(B, T, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
    q, k = apply_rope(q, cos[:T], sin[:T]), apply_rope(k, cos[:T], sin[:T])
    scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)            # (B, heads, T, T)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()     # token t sees tokens <= t
    probs = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)     # saved by softmax AND by the matmul
    y = (probs @ v).transpose(1, 2).reshape(B, T, C)
    return self.resid_dropout(self.proj(y))


# An attention-heavy model: 8 heads on a width of 128, so that the T x T term shows at short lengths.
ATTN = ModelConfig(n_layer=2, n_head=8, n_embd=128, ctx=max(SIZES["ctx_sweep"]))
probe = GPT(ATTN).to(DEVICE)
ids = batch_of_tokens(1, 64)[0]
with torch.no_grad():
    fused, _ = probe(ids)
    with patch.object(CausalSelfAttention, "forward", naive_attention):
        naive, _ = probe(ids)
print(f"naive attention gives the same logits as SDPA (to 1e-4): {torch.allclose(fused, naive, atol=1e-4)}")
del probe
''')

md(r"""
**Question:** how do the saved activations grow with the sequence length, with each attention? The same
meter measures both at a batch of one; `patch.object` swaps the attention's forward for the naive one while
`measure_activations` runs.
""", "subslide")

code(r'''
ctxs = SIZES["ctx_sweep"]
sdpa, naive = {}, {}
for t in ctxs:
    sdpa[t] = memory.measure_activations(ATTN, 1, t, "fp32", device=DEVICE)
    with patch.object(CausalSelfAttention, "forward", naive_attention):
        naive[t] = memory.measure_activations(ATTN, 1, t, "fp32", device=DEVICE)


def naive_extra_per_token(t: int, batch: int = 1) -> int:
    """Per layer and token, what the naive attention keeps beyond SDPA: the fp32 probabilities (4 bytes x heads
    x t), the bool mask (t x t bytes per layer, shared by the batch) and proj's input (a copy of the transposed
    output, 4C), minus what SDPA's path keeps instead (its rows of the table: output, log-sum-exp, proj input)."""
    rows = memory.activation_table(ATTN, batch, t, "fp32", device=DEVICE.type)
    sdpa_only = sum(r["per_token"] for r in rows if r["part"] == "each block" and r["tensor"].startswith(
        ("attention output", "attention logsumexp", "proj input")))
    return 4 * ATTN.n_head * t + t // batch + 4 * ATTN.n_embd - sdpa_only


rows = []
for t in ctxs:
    predicted = memory.estimate(ATTN, 1, t, "fp32", device=DEVICE.type).activations
    extra = (naive[t] - sdpa[t]) / (ATTN.n_layer * t)
    rows.append([t, sdpa[t] / MIB, predicted / MIB, naive[t] / MIB, naive[t] / sdpa[t], extra,
                 naive_extra_per_token(t)])
    assert abs(sdpa[t] / predicted - 1) < 0.05
    assert abs(extra / naive_extra_per_token(t) - 1) < 0.05
print(tabulate(rows, headers=["ctx", "SDPA MiB", "SDPA predicted MiB", "naive MiB", "naive / SDPA",
                              "extra B/token/layer", "predicted extra"],
               tablefmt="github", floatfmt=("", ".2f", ".2f", ".2f", ".2f", ".0f", "")))
''', tags=IGNORE)

code(r'''
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
fine = np.linspace(min(ctxs), max(ctxs), 100)
for ax, per_token in zip(axes, (False, True)):
    scale = (lambda t: 1024 * t) if per_token else (lambda t: MIB)
    ax.plot(ctxs, [sdpa[t] / scale(t) for t in ctxs], "o-", label="fused SDPA, measured")
    ax.plot(ctxs, [naive[t] / scale(t) for t in ctxs], "s-", color="tab:red",
            label="naive attention (stores T x T), measured")
    predicted_naive = [memory.estimate(ATTN, 1, int(t), "fp32", device=DEVICE.type).activations
                       + ATTN.n_layer * int(t) * naive_extra_per_token(int(t)) for t in fine]
    ax.plot(fine, np.array(predicted_naive) / np.array([scale(t) for t in fine]), ":", color="tab:red",
            label="naive: SDPA's table + the extra per token and layer (4hT + T + ...)")
    ax.set_xlabel("sequence length T (tokens, batch 1)")
    ax.set_ylabel("activations per token (KiB)" if per_token else "activations (MiB)")
    ax.set_title("per token" if per_token else "whole forward pass")
axes[1].legend(loc="upper left", fontsize=8)
fig.suptitle(f"Saved activations vs sequence length ({ATTN.n_layer} layers, {ATTN.n_head} heads, width {ATTN.n_embd})")
fig.tight_layout()
plt.show()
''', "subslide")

md(r"""
With fused attention the cost per token is flat: total activations grow linearly with T. With the naive
attention the cost per token itself grows linearly with T, so the total grows with T²: the right panel's
red line is the quadratic term, 4 bytes x heads x T per token per layer (the fp32 probabilities) plus the
causal mask, exactly what the dotted prediction from the code says. Korthikanti's 5as/h is the same term
in 16-bit with dropout: 2 bytes of softmax, 1 of mask, 2 of dropped scores.

This is why long contexts were once out of reach, and why fused attention kernels (FlashAttention, and
SDPA's implementations of it) changed that: they trade a recomputation in backward for never storing the
scores.
""", "fragment")

# ----------------------------------------------------------------------------------------------------------
# 6. Calculator

md(r"""
## 6. A memory calculator

Every number so far came from `memory.estimate`, which needs only the config. **Question:** what would *your*
run need? Pick a preset, a micro-batch, a context length, a precision and a checkpointing mode (chapter 6),
and compare the predicted peak with common GPU sizes. In Jupyter or Colab the next cell shows sliders; where
widgets cannot display (a script, a static render of this page), it draws the same calculator for one
setting. The picture below it answers the most common question for the 125m model at once.
""", "slide")

code(r'''
PRECISIONS = {"fp32": ("fp32", False), "bf16 autocast": ("bf16", False), "fp16 autocast": ("fp16", False),
              "bf16-pure": ("bf16-pure", False), "bf16-pure + fp32 master": ("bf16-pure", True)}
CARDS = {"T4 / V100 16 GB": 16 * GB, "L4 / RTX 4090 24 GB": 24 * GB, "A100 40 GB": 40 * GB,
         "A100 / H100 80 GB": 80 * GB}


def calculator(preset: str = "125m", batch: int = 8, ctx: int = 1024, precision: str = "bf16 autocast",
               checkpointing: str = "none") -> None:
    """Draw the predicted memory of one training step (for a GPU) and say which cards it fits."""
    cfg = get_config(preset, ctx=max(ctx, PRESETS[preset].ctx))  # a longer ctx only lengthens the RoPE tables
    name, master = PRECISIONS[precision]
    b = memory.estimate(cfg, batch, ctx, name, checkpointing, master_weights=master, device="cuda")
    fig, ax = plt.subplots(figsize=(10, 2.4))
    left = 0.0
    for part, color in PARTS:
        ax.barh(0, getattr(b, part) / GIB, left=left, color=color, label=part)
        left += getattr(b, part) / GIB
    ax.plot(b.peak / GIB, 0, "kD", ms=9, label=f"predicted peak {b.peak / GIB:.2f} GiB")
    for i, (card, size) in enumerate(CARDS.items()):
        ax.axvline(size / GIB, color="gray", ls=":")
        ax.text(size / GIB, 0.45 - 0.12 * i, card, fontsize=8, ha="right")
    ax.set_xlim(0, max(b.peak, left * GIB, 80 * GB) / GIB * 1.05)
    ax.set_yticks([])
    ax.set_xlabel("memory (GiB)")
    ax.set_title(f"{preset}, batch {batch} x ctx {ctx}, {precision}, checkpointing {checkpointing}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    plt.show()
    fits = [card for card, size in CARDS.items() if b.peak <= size]
    print(f"static {b.static / GIB:.2f} GiB, activations {b.activations / GIB:.2f} GiB, peak {b.peak / GIB:.2f} GiB;"
          f" fits: {', '.join(fits) if fits else 'none of these cards'}")


# The static picture: the 125m model at its full context, peak against micro-batch for four set-ups.
fig, ax = plt.subplots(figsize=(9, 4.5))
micro = [1, 2, 4, 8, 16, 32, 64, 128]
for precision, mode, style in [("fp32", "none", "o-"), ("bf16 autocast", "none", "s-"),
                               ("bf16 autocast", "selective", "^--"), ("bf16 autocast", "full", "v-.")]:
    name, master = PRECISIONS[precision]
    peaks = [memory.estimate(PRESETS["125m"], m, 1024, name, mode, master, device="cuda").peak / GIB for m in micro]
    ax.plot(micro, peaks, style, label=f"{precision}, checkpointing {mode}")
for card, size in CARDS.items():
    ax.axhline(size / GIB, color="gray", ls=":", lw=1)
    ax.text(micro[0], size / GIB * 1.04, card, fontsize=8, color="gray")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("micro-batch (sequences of 1024 tokens)")
ax.set_ylabel("predicted peak (GiB)")
ax.set_title("125m model, one training step: which micro-batch fits which card")
ax.legend()
plt.show()
''')

code(r'''
try:
    import ipywidgets as widgets
    from IPython import get_ipython
    from IPython.display import display

    # A kernel with a front end (Jupyter, Colab, VS Code) can show widgets; a plain script cannot.
    WIDGETS = getattr(get_ipython(), "kernel", None) is not None
except ImportError:
    WIDGETS = False

if WIDGETS:
    display(widgets.interactive(
        calculator,
        preset=widgets.Dropdown(options=list(COURSE_PRESETS), value="125m"),
        batch=widgets.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64, 128], value=8),
        ctx=widgets.SelectionSlider(options=[128, 256, 512, 1024, 2048, 4096, 8192], value=1024),
        precision=widgets.Dropdown(options=list(PRECISIONS), value="bf16 autocast"),
        checkpointing=widgets.Dropdown(options=list(CHECKPOINTING_MODES), value="none"),
    ))
else:
    calculator()  # no widgets here: the calculator for its default setting
''', "subslide", IGNORE)

md(r"""
Things to try with the sliders: double the context and watch the red part double while the static part stays;
switch fp32 to bf16 autocast and see only the activations shrink; switch to bf16-pure and see the static part
halve; turn on full checkpointing and watch the activations collapse to the block inputs. In the picture
above, the lines are straight on log-log axes because activations are linear in the batch, and each set-up
reaches a card's line at a different micro-batch: that crossing is what chapter 7's planner searches for.
""", "fragment")

# ----------------------------------------------------------------------------------------------------------
# 7. Timeline

md(r"""
## 7. A timeline of real training steps

The breakdown says how much; a timeline says *when*. PyTorch's profiler can record every allocation and free
of a run and sort each tensor into a category: parameter, optimizer state, input, activation, gradient,
autograd detail (gradients in flight), temporary. `memory.memory_timeline` profiles a few training steps and
exports that record.

**Question:** what does memory do over three steps, and when does the optimizer state appear?
""", "slide")

code(r'''
tl_cfg = get_config(SIZES["timeline_preset"])
with tempfile.TemporaryDirectory() as tmp:
    path = memory.memory_timeline(Path(tmp) / "timeline.json", tl_cfg, SIZES["timeline_batch"],
                                  SIZES["timeline_ctx"], "fp32", device=DEVICE, steps=3)
    timeline = json.loads(path.read_text()) if path else None

# The JSON holds [times in microseconds, sizes]; column 0 of sizes is unused, columns 1.. follow the order of
# torch's categories (a private table of the profiler, reproduced here).
CATEGORIES = ["parameter", "optimizer state", "input", "temporary", "activation", "gradient", "autograd detail",
              "unknown"]
COLORS = ["darkgreen", "goldenrod", "black", "mediumpurple", "tab:red", "mediumblue", "royalblue", "grey"]
if timeline is None:
    print("this torch build cannot export a memory timeline (see the warning): the rest of section 7 is skipped")
else:
    times = (np.array(timeline[0]) - timeline[0][0]) / 1000  # ms from the start
    sizes = np.array(timeline[1])[:, 1:]
    cats = dict(zip(CATEGORIES, sizes.T))
    print(f"{len(times):,} points over {times[-1]:.0f} ms; largest total {sizes.sum(axis=1).max() / MIB:.2f} MiB")
''', tags=IGNORE)

md(r"""
The profiler does not mark the phases of a step, but the categories give them away: the activations are at
their largest at the end of the forward pass; the gradients are complete at the end of backward;
`zero_grad(set_to_none=True)` frees them when the step ends.
""", "fragment")

code(r'''
def step_phases(times: np.ndarray, cats: dict) -> list[tuple[int, str, int, int]]:
    """(step, phase, first index, last index) of forward, backward and optimizer, read from the categories."""
    grad, act = cats["gradient"], cats["activation"]
    ends = [i for i in range(1, len(grad)) if grad[i - 1] > 0 and grad[i] == 0]  # zero_grad frees the gradients
    bounds = [0, *ends, len(grad) - 1]
    spans = []
    windows = [(s, e) for s, e in zip(bounds[:-1], bounds[1:]) if act[s:e + 1].max() > 0]  # a forward ran
    for step, (start, end) in enumerate(windows, start=1):
        forward_end = start + int(np.argmax(act[start:end + 1]))
        g = grad[start:end + 1]
        backward_end = start + int(np.argmax(g >= 0.999 * g.max())) if g.max() > 0 else end
        spans += [(step, "forward", start, forward_end), (step, "backward", forward_end, backward_end),
                  (step, "optimizer", backward_end, end)]
    return spans


if timeline is not None:
    spans = step_phases(times, cats)
    fig, ax = plt.subplots(figsize=(12, 5))
    ax.stackplot(times, sizes.T / MIB, labels=CATEGORIES, colors=COLORS, step="post", alpha=0.85)
    shades = {"forward": "#fff3b0", "backward": "#cde7ff", "optimizer": "#e2f5d0"}
    top = sizes.sum(axis=1).max() / MIB
    for step, phase, i, j in spans:
        ax.axvspan(times[i], times[j], color=shades[phase], alpha=0.6, zorder=0)
        short = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}[phase]
        ax.text((times[i] + times[j]) / 2, top * 1.02, f"{short}\n{step}", ha="center", fontsize=8)
    ax.set_ylim(0, top * 1.15)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("memory (MiB)")
    ax.set_title(f"{SIZES['timeline_preset']} model, batch {SIZES['timeline_batch']} x ctx "
                 f"{SIZES['timeline_ctx']}, fp32: three training steps (fwd / bwd / opt)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    plt.show()
''', "subslide", IGNORE)

md(r"""
Reading the picture from the left:

- **Forward (step 1):** activations (red) pile up block by block on top of the parameters (dark green),
  then the logits and the loss's log-softmax, both as wide as the vocabulary, add a large step at the end.
- **Backward:** it opens with a spike: cross-entropy's fp32 gradients over the vocabulary ("autograd
  detail", gradients in flight). Then the saved tensors are released as backward passes each block, while
  the parameters' gradients (dark blue) grow to the size of the parameters. In a model this small most of
  the red is vocabulary-sized (the logits, held by the loop until backward ends); in a wider, deeper model
  the blocks' share dominates and the red falls block by block.
- **Optimizer:** in step 1, AdamW creates its state (gold): two fp32 tensors per parameter. It never goes
  away. Steps 2 and 3 repeat step 1's shape, *on top of* the optimizer state, so their peak is higher.

**Question:** how much higher, and is it exactly the optimizer state?
""", "fragment")

code(r'''
if timeline is not None:
    total = sizes.sum(axis=1)
    rows = []
    for step in sorted({s for s, *_ in spans}):
        first = min(i for s, _, i, _ in spans if s == step)
        fwd_bwd_end = max(j for s, phase, _, j in spans if s == step and phase == "backward")
        last = max(j for s, *_, j in spans if s == step)
        rows.append([step, cats["optimizer state"][first] / MIB, total[first:fwd_bwd_end + 1].max() / MIB,
                     cats["optimizer state"][last] / MIB])
    print(tabulate(rows, headers=["step", "optimizer state at its start (MiB)", "peak of forward + backward (MiB)",
                                  "optimizer state at its end (MiB)"], tablefmt="github", floatfmt=".2f"))
    adamw = 8 * count_params(tl_cfg)  # exp_avg + exp_avg_sq, fp32
    print(f"AdamW state expected: 8 bytes x {count_params(tl_cfg):,} parameters = {adamw / MIB:.2f} MiB")
    print(f"peak of step 2 - peak of step 1: {rows[1][2] - rows[0][2]:.2f} MiB")
    assert rows[0][1] == 0 and abs(rows[0][3] * MIB / adamw - 1) < 0.01
    assert abs((rows[1][2] - rows[0][2]) * MIB / adamw - 1) < 0.15
''', tags=IGNORE)

md(r"""
The optimizer state is zero when step 1 starts and equal to 8 bytes per parameter when it ends; from then on
every forward and backward runs on top of it, and the peak of step 2 is higher than the peak of step 1 by
about that much (the two printed numbers). Any measurement of "the memory of a step" must therefore look
at a step *after* the first, or add the state, as `memory.measure` does.
""", "fragment")

# ----------------------------------------------------------------------------------------------------------
# 8. Common failures

md(r"""
## 8. Common failures

Four mistakes, each run live: the symptom first, then the fix.

### 8.1 Counting saved tensors the wrong way

The first meter one writes adds up the size of every tensor that reaches the pack hook. It looks right and
it is wrong twice: it counts **parameters** (a linear layer saves its weight for the input's gradient, but the
weight exists anyway) and it counts **tensors instead of storages** (a tensor saved by two ops counts twice; a
view counts only its own slice, though it keeps its whole storage alive).
""", "slide")

code(r'''
class CountEveryTensor(torch.autograd.graph.saved_tensors_hooks):
    """A naive meter: records (storage address, the tensor's own bytes, its storage's bytes) for each pack."""

    def __init__(self) -> None:
        self.records: list[tuple[int, int, int]] = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            s = t.untyped_storage()
            self.records.append((s.data_ptr(), t.numel() * t.element_size(), s.nbytes()))
            return t.detach()  # a detached alias: returning t itself can keep the graph alive forever

        super().__init__(pack, lambda t: t)


model = GPT(MEASURED).to(DEVICE)
x, y = batch_of_tokens(SIZES["batch"], SIZES["ctx"])
naive_meter, meter = CountEveryTensor(), memory.SavedTensorMeter(model)
with naive_meter:
    _, loss_naive = model(x, y)  # keep the loss: it holds the graph, and with it the saved tensors
with meter:
    _, loss_meter = model(x, y)
fixed = {p.untyped_storage().data_ptr() for p in [*model.parameters(), *model.buffers()]}
records = naive_meter.records
not_fixed = [r for r in records if r[0] not in fixed]
rows = [
    ["every saved tensor, at its own size", len(records), sum(r[1] for r in records)],
    ["  without parameters and buffers", len(not_fixed), sum(r[1] for r in not_fixed)],
    ["  and each storage once, at its full size", len({r[0] for r in not_fixed}),
     sum({r[0]: r[2] for r in not_fixed}.values())],
    ["memory.SavedTensorMeter", len(meter.alive()), saved_bytes(meter)],
    ["memory.estimate (the table)", "", memory.estimate(MEASURED, *x.shape, "fp32", device=DEVICE.type).activations],
]
print(tabulate(rows, headers=["count", "tensors", "bytes"], tablefmt="github", intfmt=","))
weights = sum(p.numel() * p.element_size() for p in model.parameters())
counted = sum(r[1] for r in records if r[0] in fixed)
print(f"\nparameter bytes in the naive count: {counted:,} = {counted / rows[3][2]:.2f} x the activations "
      f"(the model's weights: {weights:,} bytes)")
assert rows[2][2] == rows[3][2]
''', tags=IGNORE)

md(r"""
The naive sum is inflated by the weights: every weight matrix is saved by its matmul (the tied embedding
too, as the output head's weight). At the small batch measured here that error is about the size of the
activations themselves (the printed ratio); it shrinks in relative terms as the batch grows, but it never
goes away, and since it does not grow with the batch, a plot of the naive count against the batch still
looks like a straight line, just one with the wrong intercept. Leaving out the parameters and
counting each storage once gives exactly the meter's number.
**Fix:** count storages, not tensors, and leave out what exists anyway (parameters, buffers).
""", "fragment")

md(r"""
### 8.2 Forgetting that the optimizer state arrives after the first step

A budget check that runs *one* training step and reads its peak sees a step without AdamW's state: the state
is created inside the first `optimizer.step()`, after that step's forward and backward. Section 7 measured the
symptom: the peak of step 2 is higher than that of step 1 by 8 bytes per parameter. With a model whose static
memory is large next to its activations (a big model at a small batch), that difference decides whether a run
fits.

**Fix:** measure the second step, after a warm-up step (what `memory.measure` does on a GPU, and what chapter
7's `find_max_batch_size` relies on), or add the state to the first step's numbers (what `memory.measure` does
on the CPU). `memory.estimate` counts it in every phase of the step:
""", "subslide")

code(r'''
b = memory.estimate(MEASURED, SIZES["batch"], SIZES["ctx"], "fp32", device=DEVICE.type)
print(tabulate([[phase, value / MIB, b.optimizer / MIB] for phase, value in b.moments.items()],
               headers=["phase of the step (10m)", "predicted live MiB", "of which AdamW state"],
               tablefmt="github", floatfmt=".2f"))
''')

md(r"""
### 8.3 `losses.append(loss)`: keeping the graph alive

Logging the loss by appending the tensor, rather than `loss.item()`, keeps the tensor *and the graph behind
it*. How much that graph holds depends on whether backward has run on it: `backward()` frees the tensors
it saved, as it goes. **Question:** what does each loop hold after each step? The meter's `alive()` reports
the saved tensors still held, here over four steps of a training loop and of a loop that only computes the
loss (an evaluation, or a loss computed for logging).
""", "subslide")

code(r'''
def held_per_step(train: bool, keep_tensor: bool, steps: int = 4) -> list[int]:
    """Saved bytes still alive after each step of a loop that appends loss (or loss.item()) to a list."""
    model = GPT(MEASURED).to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters())
    x, y = batch_of_tokens(SIZES["batch"], SIZES["ctx"])
    meter, losses, held = memory.SavedTensorMeter(model), [], []
    with meter:
        for _ in range(steps):
            _, loss = model(x, y)
            if train:
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            losses.append(loss if keep_tensor else loss.item())
            held.append(saved_bytes(meter))
    return held


loops = {"train, append(loss)": held_per_step(True, True),
         "no backward, append(loss)": held_per_step(False, True),
         "no backward, append(loss.item())": held_per_step(False, False)}
print(tabulate([[step + 1, *(held[step] / MIB for held in loops.values())] for step in range(4)],
               headers=["after step", *(f"{k} (MiB)" for k in loops)], tablefmt="github", floatfmt=".2f"))
one_batch = memory.estimate(MEASURED, SIZES["batch"], SIZES["ctx"], "fp32", device=DEVICE.type).activations
growth = np.diff(loops["no backward, append(loss)"])
print(f"growth per step without backward: {growth.mean() / MIB:.2f} MiB; one batch of activations: "
      f"{one_batch / MIB:.2f} MiB")
assert all(abs(g / one_batch - 1) < 0.05 for g in growth)
assert len(set(loops["no backward, append(loss.item())"])) == 1 and len(set(loops["train, append(loss)"])) == 1
''', tags=IGNORE)

md(r"""
In the training loop the appended losses cost almost nothing: backward already freed what their graphs saved,
so each entry holds a scalar and some bookkeeping (the first column stays flat). Without backward, each
appended loss keeps **a whole batch of activations** alive, and memory grows by one batch per step, the
printed growth, until the process runs out. `loss.item()` (or `loss.detach()`) drops the graph: the last
column stays flat. **Fix:** log `loss.item()`, always; it also avoids holding a GPU tensor per step.
""", "fragment")

md(r"""
### 8.4 Evaluating without `torch.no_grad()`

`model.eval()` switches dropout off; it does **not** switch autograd off. An evaluation forward under
`model.eval()` alone builds the same graph as a training forward and saves the same tensors, for a backward
that never comes. **Question:** what does an evaluation forward save, with and without `torch.no_grad()`?
""", "subslide")

code(r'''
model = GPT(MEASURED).to(DEVICE).eval()
x, y = batch_of_tokens(SIZES["batch"], SIZES["ctx"])
rows = []
for label, context in [("model.eval() only", torch.enable_grad), ("model.eval() + torch.no_grad()", torch.no_grad),
                       ("model.eval() + torch.inference_mode()", torch.inference_mode)]:
    meter = memory.SavedTensorMeter(model)
    with meter, context():
        _, loss = model(x, y)
    rows.append([label, saved_bytes(meter) / MIB, loss.requires_grad])
print(tabulate(rows, headers=["evaluation forward (10m)", "saved for backward (MiB)", "loss.requires_grad"],
               tablefmt="github", floatfmt=".2f"))
training = memory.estimate(MEASURED, *x.shape, "fp32", device=DEVICE.type).activations
print(f"a training forward saves {training / MIB:.2f} MiB")
assert rows[1][1] == rows[2][1] == 0 and abs(rows[0][1] * MIB / training - 1) < 0.05
''', tags=IGNORE)

md(r"""
Without `no_grad`, evaluation holds a training forward's worth of activations while each batch runs, for a
backward that never comes: a validation batch made larger "because evaluation needs no gradients" runs out
of memory, and combined with 8.3 the memory grows batch after batch. Under `torch.no_grad()` nothing is saved
(and `loss.requires_grad` is False). **Fix:** decorate the evaluation function with `@torch.no_grad()` (or
`torch.inference_mode()`, stricter and a little faster), as `minigpt.train`'s evaluation does.
""", "fragment")

# ----------------------------------------------------------------------------------------------------------
# Summary, exercises, references

md(r"""
## Summary

- A training step holds **weights, gradients, optimizer state and activations**, plus short-lived buffers
  (the logits and their gradients). The first three are static: bytes per parameter x parameters.
- **Bytes per parameter with AdamW:** 16 in fp32 *and* with autocast, 18 for pure bf16 with an fp32 master
  copy, 8 for pure bf16. "12 + 2 = 14" forgets the gradients. A 7B model needs 112 GB before activations: no
  single 80 GB GPU holds it, and two do only if the state is split between them.
- **Activations** are what autograd saves for backward. For our model, per token: L(52C + 16H + 8 + 4h) +
  12C + 4V + 20 bytes in fp32. The rule of thumb (10 values of width C per layer) undercounts it;
  Korthikanti's sbh(34 + 5as/h) counts the s x s scores, which fused attention never stores.
- **Measure with the saved-tensor meter:** count storages, not tensors, and leave out parameters. Our table
  matches it within 5%; `memory.measure` matches a whole step, static terms to the byte.
- Activations grow **linearly with the batch**; with the sequence length linearly under fused SDPA and
  **quadratically** with a naive attention (4 bytes x heads x T per token and layer).
- The **peak is the worst moment**, not the sum: early in backward, with the logits' fp32 gradients. The
  profiler's timeline shows the forward spike, the backward, and AdamW's state arriving after step one.
- Failures: naive counting (parameters, views), measuring only the first step, `losses.append(loss)` in a loop
  without backward, and evaluation without `torch.no_grad()`.
""", "slide")

md(r"""
## Exercises

The exercises are in `exercises/ch02_memory_anatomy.py`, with a notebook `exercises/ch02.ipynb` that runs
them and checks each answer. Grade them with `pytest exercises/ -k "2."`.

1. **Exercise 2.1** (`count_parameters`): the number of parameters of `GPT(cfg)` from the config alone, with
   the tied embedding counted once. Check it against section 1's table.
2. **Exercise 2.2** (`static_bytes`): weights + gradients + AdamW state in bytes, for each regime of section
   2's table (fp32, bf16, fp16, bf16-pure, bf16-pure+master).
3. **Exercise 2.3** (`activation_bytes`): the bytes an fp32 training step keeps for backward, tensor by tensor
   as in section 3; the grader accepts 5% off, the same tolerance the meter gets here.

Going further: measure the 30m model with `memory.measure_activations` at a few batch sizes and check the
straight line of section 5.1; on a GPU, set `SCALE = "full"` and compare the calculator's peak with
`torch.cuda.max_memory_allocated` over a real step.
""", "slide")

md(r"""
## References

- V. Korthikanti, J. Casper, S. Lym, L. McAfee, M. Andersch, M. Shoeybi, B. Catanzaro, *Reducing Activation
  Recomputation in Large Transformer Models*, 2022. arXiv:2205.05198 (activation memory per layer,
  sbh(34 + 5as/h)).
- S. Rajbhandari, J. Rasley, O. Ruwase, Y. He, *ZeRO: Memory Optimizations Toward Training Trillion Parameter
  Models*, SC 2020. arXiv:1910.02054 (16 bytes per parameter for mixed-precision Adam, and sharding it).
- T. Dao, D. Y. Fu, S. Ermon, A. Rudra, C. Ré, *FlashAttention: Fast and Memory-Efficient Exact Attention with
  IO-Awareness*, 2022. arXiv:2205.14135 (attention without storing the s x s scores).
- I. Loshchilov, F. Hutter, *Decoupled Weight Decay Regularization*, 2019. arXiv:1711.05101 (AdamW).
- PyTorch documentation: *Understanding CUDA Memory Usage* (memory snapshots), `torch.profiler` and
  `export_memory_timeline`, *Hooks for saved tensors* (`torch.autograd.graph.saved_tensors_hooks`),
  `torch.nn.functional.scaled_dot_product_attention`, `torch.no_grad` and `torch.inference_mode`.
""", "slide")


def main() -> int:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for i, cell in enumerate(CELLS):
        cell["id"] = f"ch02-{i:02d}"
    nb.cells = CELLS
    nbformat.validate(nb)
    OUT.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(CELLS)} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
