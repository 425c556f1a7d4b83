"""AdamW as the course trains with it: decoupled weight decay on matrices only, fused where it can be.

AdamW keeps two moments per parameter (8 bytes for fp32 state): m, a running mean of the gradient, and v, a
running mean of its square. The update is lr * m / (sqrt(v) + eps), plus weight decay on the weight itself.
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn

from minigpt import parallel
from minigpt.config import TrainConfig
from minigpt.optim.adamw8bit import AdamW8bit

# Where torch (>= 2.4) has a fused AdamW kernel: an update with no temporary tensors. minigpt.memory's estimate
# relies on this list; fused_adamw_supported confirms it on the torch actually installed.
FUSED_ADAMW_DEVICES = ("cpu", "cuda")


@functools.cache
def fused_adamw_supported(device_type: str) -> bool:
    """Whether this torch has a fused AdamW kernel for the device type (CUDA, and the CPU since torch 2.4)."""
    try:
        p = nn.Parameter(torch.zeros(1, device=device_type))
        p.grad = torch.zeros_like(p)
        torch.optim.AdamW([p], fused=True).step()
        return True
    except (RuntimeError, TypeError):  # "fused=True requires all the params to be ..." where there is no kernel
        return False


def make_optimizer(params: list[nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW (or AdamW8bit, as cfg.optimizer says) with weight decay on matrices (and the embedding) only.

    Fused where the device has the kernel: one pass over each parameter and its two moments, no temporary
    tensors; elsewhere foreach, which batches the update over all parameters.
    """
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if cfg.optimizer == "adamw8bit":  # the same groups and hyperparameters, 8-bit moments (adamw8bit.py);
        # --compile also fuses its update into one pass (on a CPU the C loop of adamw8bit_kernel.c, built once)
        return AdamW8bit(groups, lr=cfg.lr, betas=cfg.betas, compile=cfg.compile)
    fused = fused_adamw_supported(params[0].device.type)
    if cfg.precision == "fp16" and cfg.shard == "fsdp" and parallel.world_size() > 1:
        fused = False  # the fused kernel rejects ShardedGradScaler's inf flag (parallel.FSDP_FP16_FUSED_ERROR)
    settings = dict(lr=cfg.lr, betas=cfg.betas, fused=fused or None, foreach=not fused or None)
    if cfg.shard == "zero1" and parallel.world_size() > 1:  # each process keeps the moments of its share only
        return parallel.zero1_optimizer(groups, torch.optim.AdamW, **settings)
    return torch.optim.AdamW(groups, **settings)
