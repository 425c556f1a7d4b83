"""fp32 master weights for a bf16 model: the optimizer updates the copies, the model gets them rounded."""

from __future__ import annotations

import torch
import torch.nn as nn


class MasterWeights:
    """fp32 copies of a bf16 model's parameters: the optimizer updates these, then they are rounded back.

    An update smaller than half a bf16 step would vanish if added to the bf16 weight directly; added
    to the fp32 copy it accumulates until it is large enough to show in bf16.
    """

    def __init__(self, model: nn.Module) -> None:
        self.pairs = [(p, p.detach().float().requires_grad_(True)) for p in model.parameters()]

    @property
    def params(self) -> list[torch.Tensor]:
        return [m for _, m in self.pairs]

    def grads_to_master(self) -> None:
        for p, m in self.pairs:
            m.grad = None if p.grad is None else p.grad.float()
            p.grad = None

    @torch.no_grad()
    def master_to_model(self) -> None:
        for p, m in self.pairs:
            p.copy_(m)
