"""A nanoGPT-style training step: the loop learners compare minigpt.train with.

It does what nanoGPT's train.py does each iteration, on minigpt's model and batches: set the learning
rate by hand, forward under autocast, loss / accum and backward per micro-batch, clip the gradient norm,
step a fused AdamW (two parameter groups, weight decay on matrices only), zero the gradients. The model
is optionally wrapped in torch.compile, as nanoGPT does by default. No logging, no checkpoints, no
token-count bookkeeping: it is the fastest honest loop, the yardstick for the teaching loop.
"""

from __future__ import annotations

import torch

from minigpt.data import TokenData
from minigpt.model import GPT, get_config
from minigpt.precision import autocast_context
from minigpt.train import TrainConfig, fused_adamw_supported, lr_at


class NanoGPTStyleStep:
    """One call = one optimizer step over cfg.accum micro-batches, drawn like minigpt.train draws them."""

    def __init__(self, cfg: TrainConfig, data: TokenData, compile: bool = False) -> None:
        if cfg.precision not in ("fp32", "bf16"):
            raise ValueError(f"the reference step runs fp32 or bf16 autocast, not {cfg.precision}")
        self.cfg, self.data, self.device = cfg, data, torch.device(cfg.device)
        self.model = GPT(get_config(cfg.preset, dropout=cfg.dropout), seed=cfg.seed).to(self.device)
        params = list(self.model.parameters())
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        fused = fused_adamw_supported(self.device.type)
        self.optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, fused=fused or None)
        self.forward = torch.compile(self.model) if compile else self.model
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.step = 0

    def __call__(self) -> None:
        cfg = self.cfg
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.lr * lr_at(self.step, cfg)
        x, y = self.data.get_batch("train", cfg.batch * cfg.accum, cfg.ctx, self.generator)
        for xb, yb in zip(x.split(cfg.batch), y.split(cfg.batch)):
            with autocast_context(self.device, cfg.precision):
                _, loss = self.forward(xb.to(self.device), yb.to(self.device))
            (loss / cfg.accum).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
