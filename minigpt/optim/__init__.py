"""The optimizers and what they keep per parameter: one module per kind of optimizer state.

`make_optimizer(params, cfg)` is the one entry the step calls; `MasterWeights` holds fp32 copies of a bf16
model for bf16-pure with --master-weights.
"""

from minigpt.optim.adamw import FUSED_ADAMW_DEVICES, fused_adamw_supported, make_optimizer
from minigpt.optim.master_weights import MasterWeights

__all__ = ["FUSED_ADAMW_DEVICES", "MasterWeights", "fused_adamw_supported", "make_optimizer"]
