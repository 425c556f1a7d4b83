"""LoRA: train small low-rank adapters beside the frozen weights of a model (Hu et al. 2021).

"LoRA: Low-Rank Adaptation of Large Language Models" (Hu et al. 2021) freezes a pretrained weight W (out x in)
and learns its change as a product of two thin matrices: W + (alpha / r) * B @ A, with A (r x in) and B (out x r).
Only A and B get gradients and AdamW state, so those terms of the step shrink from the whole model's to the
adapters': r * (in + out) values per adapted layer instead of in * out. B starts at zero, so at step 0 the
adapted model IS the base model.

QLoRA (Dettmers et al. 2023) also stores the frozen W in 4 bits (minigpt.quantize). Every frozen weight here,
whatever its dtype, goes through FrozenMatmul: it is unpacked into the compute dtype for the forward's matmul,
freed, and unpacked again for the backward's. The backward of x @ W^T needs only W, never x, so nothing of the
frozen layer is kept for backward, and no full-precision copy of the base stays alive.
"""

from __future__ import annotations

import hashlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from minigpt.model import GPT, ModelConfig
from minigpt.quantize import BASE_DTYPES, DEFAULT_BLOCK, QUANTIZED, dequantize, quantize, unpacking

# The linear layers of a block, by name, and the groups --lora-targets accepts.
LINEARS = {"qkv": "attn", "proj": "attn", "gate": "mlp", "up": "mlp", "down": "mlp"}
TARGET_GROUPS = {"attn": ("qkv", "proj"), "mlp": ("gate", "up", "down"), "all": tuple(LINEARS)}
# Attention only, as Hu et al. adapted (they found W_q and W_v enough; our q, k, v are one fused matrix):
# the fewest adapter parameters. QLoRA found adapting every linear layer ("all") needed to match full
# fine-tuning on harder tasks; --lora-targets all costs about 3x the adapters.
DEFAULT_TARGETS = "attn"
_STORAGE_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


def parse_targets(spec: str) -> tuple[str, ...]:
    """'attn', 'mlp', 'all' or a comma list of layer names (qkv,proj,gate,up,down) -> the layer names, in order."""
    names: set[str] = set()
    for part in (p.strip() for p in str(spec).split(",")):
        if part in TARGET_GROUPS:
            names.update(TARGET_GROUPS[part])
        elif part in LINEARS:
            names.add(part)
        else:
            choices = ", ".join([*TARGET_GROUPS, *LINEARS])
            raise ValueError(f"--lora-targets: unknown target {part!r} in {spec!r}; choose from {choices}")
    return tuple(n for n in LINEARS if n in names)


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a matmul on x runs in: autocast's 16-bit dtype inside autocast, else x's own."""
    device = x.device.type
    if torch.amp.autocast_mode.is_autocast_available(device) and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return x.dtype


class FrozenMatmul(torch.autograd.Function):
    """y = x @ W^T for a frozen W that is unpacked (cast or dequantized) in the forward and again in the backward.

    Only dx = dy @ W is needed in backward (W gets no gradient), so nothing is saved but the layer itself.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, layer: LoRALinear) -> torch.Tensor:
        ctx.layer = layer
        with torch.autocast(x.device.type, enabled=False):  # x already has the compute dtype
            return F.linear(x, layer.unpacked_weight(x.dtype))

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad @ ctx.layer.unpacked_weight(grad.dtype), None


class LoRALinear(nn.Module):
    """A frozen linear layer stored in `base_dtype`, plus (rank > 0) a trainable adapter (alpha/rank) * B @ A.

    The frozen weight is kept as non-trainable parameters (so it is counted, moved and saved with the model):
    `weight` for fp32 and bf16, `codes` and `scales` for int8 and nf4.
    """

    def __init__(
        self,
        linear: nn.Linear,
        rank: int = 0,
        alpha: float = 16.0,
        base_dtype: str = "fp32",
        block: int = DEFAULT_BLOCK,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if linear.bias is not None:
            raise ValueError("LoRALinear wraps bias-free linear layers (every minigpt layer is one)")
        if base_dtype not in BASE_DTYPES:
            raise ValueError(f"unknown --base-dtype {base_dtype!r}; choose one of {', '.join(BASE_DTYPES)}")
        self.out_features, self.in_features = linear.weight.shape
        self.base_dtype, self.rank, self.alpha = base_dtype, rank, alpha
        w = linear.weight.detach()
        if base_dtype in QUANTIZED:
            q = quantize(w, base_dtype, block)
            self.codes = nn.Parameter(q.codes, requires_grad=False)
            self.scales = nn.Parameter(q.scales, requires_grad=False)
        else:
            self.weight = nn.Parameter(w.to(_STORAGE_DTYPE[base_dtype]), requires_grad=False)
        if rank:
            if not 1 <= rank <= min(self.in_features, self.out_features):
                raise ValueError(
                    f"--lora-rank {rank} does not fit a {self.out_features}x{self.in_features} layer: "
                    f"choose 1 to {min(self.in_features, self.out_features)}"
                )
            # Hu et al.: A random Gaussian, B zero. A's std 1/sqrt(in) keeps x @ A^T about as large as x.
            a = torch.randn(rank, self.in_features, generator=generator) / math.sqrt(self.in_features)
            self.lora_A = nn.Parameter(a.to(w.device))
            self.lora_B = nn.Parameter(torch.zeros(self.out_features, rank, device=w.device))

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def unpacked_weight(self, dtype: torch.dtype) -> torch.Tensor:
        """The frozen weight as a (out, in) tensor of `dtype`: a view when it is stored so, else a new tensor."""
        with unpacking():
            if self.base_dtype in QUANTIZED:
                return dequantize(self.codes, self.scales, (self.out_features, self.in_features), dtype)
            return self.weight.to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(compute_dtype(x))  # cast once (autocast): the frozen matmul and the adapter share it
        y = FrozenMatmul.apply(x, self)
        if not self.rank:
            return y
        # (x @ A^T) * scale is only r wide: scaling it, not the output, is the cheap place
        return y + F.linear(F.linear(x, self.lora_A) * self.scale, self.lora_B)

    @torch.no_grad()
    def merged_weight(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """W + (alpha / r) * B @ A in `dtype`: one plain matrix that computes what base + adapter compute."""
        w = self.unpacked_weight(dtype).clone()
        if self.rank:
            w += self.scale * (self.lora_B.to(dtype) @ self.lora_A.to(dtype))
        return w

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, base={self.base_dtype}, rank={self.rank}"


def add_adapters(
    model: GPT,
    rank: int,
    alpha: float = 16.0,
    targets: str = DEFAULT_TARGETS,
    base_dtype: str = "fp32",
    block: int = DEFAULT_BLOCK,
    train_norms: bool = False,
    train_embedding: bool = False,
    seed: int = 0,
) -> GPT:
    """Freeze `model` and give the `targets` linear layers of every block an adapter of `rank` (in place).

    Every block linear becomes a LoRALinear storing its frozen weight in `base_dtype`; the RMSNorm gains and the
    (tied) embedding stay in the model's dtype, frozen unless train_norms / train_embedding.
    """
    names = parse_targets(targets)
    if rank < 1:
        raise ValueError(f"--lora-rank must be at least 1, got {rank}")
    gen = torch.Generator().manual_seed(seed + 1)  # adapters drawn from their own stream, on the CPU
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.blocks:
        for name, group in LINEARS.items():
            parent = getattr(layer, group)
            r = rank if name in names else 0
            setattr(parent, name, LoRALinear(getattr(parent, name), r, alpha, base_dtype, block, gen))
    for name, p in model.named_parameters():
        if (train_norms and name.endswith("norm.weight")) or (train_embedding and name == "tok_emb.weight"):
            p.requires_grad_(True)
    return model


def lora_layers(model: nn.Module) -> list[tuple[str, LoRALinear]]:
    """(name, layer) of every LoRALinear in the model, in order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, LoRALinear)]


def has_adapters(model: nn.Module) -> bool:
    return any(m.rank for _, m in lora_layers(model))


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """What a LoRA run saves of its model: the parameters it trains (adapters, and norms/embedding if trained)."""
    return {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable(model: nn.Module, saved: dict[str, torch.Tensor]) -> None:
    """Copy trainable_state's tensors back; ValueError if the names or shapes differ from this model's."""
    params = dict(model.named_parameters())
    mine = {n for n, p in params.items() if p.requires_grad}
    if set(saved) != mine:
        extra, missing = sorted(set(saved) - mine), sorted(mine - set(saved))
        raise ValueError(f"the saved adapters do not fit this model (extra: {extra[:3]}, missing: {missing[:3]})")
    with torch.no_grad():
        for n, value in saved.items():
            if params[n].shape != value.shape:
                raise ValueError(f"the saved {n} is {tuple(value.shape)}, this model's is {tuple(params[n].shape)}")
            params[n].copy_(value)


def merged_state_dict(model: GPT, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """A plain GPT's state dict: every LoRALinear's W + (alpha/r) B @ A as a `weight` in `dtype`, the rest too."""
    out = {}
    layers = dict(lora_layers(model))
    for name, value in model.state_dict().items():
        owner, _, leaf = name.rpartition(".")
        if owner in layers:
            if leaf in ("weight", "codes"):  # one entry per layer; lora_A, lora_B, scales are folded into it
                out[f"{owner}.weight"] = layers[owner].merged_weight(dtype)
            continue
        out[name] = value.detach().to(dtype).clone()
    return out


def count_trainable(model: nn.Module) -> tuple[int, int]:
    """(trainable parameters, all parameters of the model it stands for), counting a quantized weight's values."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = 0
    for name, p in model.named_parameters():
        owner = name.rpartition(".")[0]
        if name.endswith(".codes"):  # nf4 packs two values per byte
            layer = model.get_submodule(owner)
            total += layer.in_features * layer.out_features
        elif not name.endswith(".scales"):
            total += p.numel()
    return trainable, total


def describe_trainable(model: nn.Module) -> str:
    """One line: how many parameters train, of how many, and which (adapters, norms, embedding)."""
    trainable, total = count_trainable(model)
    params = dict(model.named_parameters())
    adapters = sum(p.numel() for n, p in params.items() if n.endswith(("lora_A", "lora_B")))
    layers = [m for _, m in lora_layers(model)]
    targets = sorted({n.rpartition(".")[2] for n, m in lora_layers(model) if m.rank}, key=list(LINEARS).index)
    norms = "trained" if any(p.requires_grad for n, p in params.items() if n.endswith("norm.weight")) else "frozen"
    embedding = "trained" if params["tok_emb.weight"].requires_grad else "frozen"
    first = next(m for m in layers if m.rank)
    return (
        f"LoRA rank {first.rank} (alpha {first.alpha:g}) on {', '.join(targets)}, base {first.base_dtype}: "
        f"{trainable:,} of {total:,} parameters train ({100 * trainable / total:.2f}%): adapters {adapters:,}, "
        f"norms {norms}, embedding {embedding}"
    )


# ----------------------------------------------------------------------------------------------------------
# A frozen base's identity: a LoRA run saves the sha256 of the weights its adapters were trained on


def weights_sha256(weights: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes, in name order: the identity of a set of weights."""
    h = hashlib.sha256()
    for name in sorted(weights):
        t = weights[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy() if t.numel() else b"")  # the tensor's own bytes, not a copy
    return h.hexdigest()


_INITIAL: dict[tuple, str] = {}


def initial_sha256(model_cfg: ModelConfig, seed: int, weights: dict[str, torch.Tensor] | None = None) -> str:
    """sha256 of GPT(model_cfg, seed)'s weights (a base without --init-from), made once per shape and seed.

    weights: that init, when the caller holds it whole and fp32 (build_step_state, before the base is cast), so
    that saving never builds a second whole model beside the run's to hash it."""
    key = (repr(model_cfg), seed)
    if key not in _INITIAL:
        _INITIAL[key] = weights_sha256(weights if weights is not None else GPT(model_cfg, seed=seed).state_dict())
    return _INITIAL[key]
