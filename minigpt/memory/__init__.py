"""Where the memory of a training step goes: predicted from the model's shape, and measured.

A training step holds:
  - static memory: weights, gradients and AdamW's two moments, a fixed number of bytes per parameter;
  - activations: the tensors autograd keeps for backward, which grow with batch x ctx;
  - transient buffers: the logits and their fp32 gradients, gradients in flight during backward, blocks
    recomputed by checkpointing, autocast's 16-bit copies of the weights, AdamW's temporaries.
The peak is the worst moment of the step (MemoryBreakdown.moments), not the sum of the parts.

Two modules fill in the same MemoryBreakdown:
  - estimate.py predicts it from the config alone: estimate(), activation_table() (one row per saved tensor);
  - measure.py meters one real step of minigpt.train: measure(), memory_snapshot(), memory_timeline().
sharded_state_bytes() predicts the static part one process holds under --shard zero1 or fsdp (and
sharded_estimate() a whole step of one process), and
minigpt.distributed.measure_rank_state_bytes() measures it on real processes.
The tests and benchmarks/memory_grid.py check that the two agree: activations within 5%, static terms to
the byte.
"""

from minigpt.memory.estimate import (
    CUDA_LIBRARY_WORKSPACE,
    MemoryBreakdown,
    activation_table,
    activations_korthikanti,
    activations_rule_of_thumb,
    estimate,
    layer_bytes_per_token,
    sharded_estimate,
    sharded_state_bytes,
    static_table,
)
from minigpt.memory.measure import (
    TIMELINE_SUFFIXES,
    LiveTensorTracker,
    SavedTensorMeter,
    measure,
    measure_activations,
    memory_snapshot,
    memory_timeline,
)

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
