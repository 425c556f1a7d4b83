"""Where the memory of a training step goes: predicted from the model's shape, and measured.

A training step holds:
  - static memory: weights, gradients and AdamW's two moments, a fixed number of bytes per parameter;
  - activations: the tensors autograd keeps for backward, which grow with batch x ctx;
  - transient buffers: the logits and their fp32 gradients, gradients in flight during backward, blocks
    recomputed by checkpointing, autocast's 16-bit copies of the weights, AdamW's temporaries.
The peak is the worst moment of the step (MemoryBreakdown.moments), not the sum of the parts.

Two sides fill in the same MemoryBreakdown (breakdown.py):
  - estimate.py predicts it from the config alone, one module per term: static_state.py (weights, gradients,
    optimizer state), activations.py (activation_table(): one row per saved tensor), loss_head.py (the
    logits); estimate.py itself adds the transients and the moments of the step where memory peaks;
  - measure.py meters one real step of minigpt.step with the meters of meters.py: measure();
    pictures.py records the same steps for PyTorch's viewers: memory_snapshot(), memory_timeline().
sharded_state_bytes() predicts the static part one process holds under --shard zero1 or fsdp (and
sharded_estimate() a whole step of one process), and
minigpt.distributed.measure_rank_state_bytes() measures it on real processes.
The tests and benchmarks/memory_grid.py check that the two agree: activations within 5%, static terms to
the byte.
"""

from minigpt.memory.activations import (
    activation_table,
    activations_korthikanti,
    activations_rule_of_thumb,
    layer_bytes_per_token,
)
from minigpt.memory.breakdown import MemoryBreakdown
from minigpt.memory.estimate import CUDA_LIBRARY_WORKSPACE, estimate, sharded_estimate
from minigpt.memory.measure import measure, measure_activations
from minigpt.memory.meters import LiveTensorTracker, SavedTensorMeter
from minigpt.memory.pictures import TIMELINE_SUFFIXES, memory_snapshot, memory_timeline
from minigpt.memory.static_state import sharded_state_bytes, static_table

__all__ = [
    "CUDA_LIBRARY_WORKSPACE",
    "TIMELINE_SUFFIXES",
    "LiveTensorTracker",
    "MemoryBreakdown",
    "SavedTensorMeter",
    "activation_table",
    "activations_korthikanti",
    "activations_rule_of_thumb",
    "estimate",
    "layer_bytes_per_token",
    "measure",
    "measure_activations",
    "memory_snapshot",
    "memory_timeline",
    "sharded_estimate",
    "sharded_state_bytes",
    "static_table",
]
