"""Term: the optimizer's state and its step's temporaries, per optimizer; the gradients the step in backward keeps.

AdamW keeps two moments per parameter in the trained parameters' dtype (static_state.py: 8 bytes a
parameter in fp32). AdamW8bit (minigpt/optim/adamw8bit.py) keeps, per tensor, one byte per value for each
moment and an fp32 scale per block of 256 values for each, or two fp32 moments for a tensor under 4096
values; its step works on fp32 copies of one chunk at a time. With --optimizer-in-backward
(minigpt/optim/in_backward.py) a gradient is freed as soon as its parameter is stepped: the whole model's
gradients are never alive together, only the largest single one.
"""

from __future__ import annotations

from minigpt.memory.static_state import parameter_shapes
from minigpt.model import ModelConfig
from minigpt.optim import FUSED_ADAMW_DEVICES
from minigpt.optim.adamw8bit import CHUNK, MIN_QUANTIZED, state_bytes
from minigpt.optim.codes import n_blocks


def _numels(cfg: ModelConfig) -> list[int]:
    return [_product(shape) for shape in parameter_shapes(cfg)]


def _product(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def adamw8bit_state_bytes(cfg: ModelConfig) -> int:
    """Both moments of every parameter tensor: 2 bytes a value + 8 bytes a block of 256, or 8 bytes a value if small.

    The step counters are Python ints, not tensors: nothing on the device.
    """
    return sum(state_bytes(n) for n in _numels(cfg))


def update_temporaries(numel: int, optimizer: str, device: str, sixteen_bit_params: bool) -> int:
    """The most bytes one parameter tensor's update holds at once beyond the state, `numel` values.

    AdamW8bit, for a chunk of L values (the tensor, or CHUNK of it if it is larger): m and v dequantized
    (4L each) and sqrt(v) (4L, then the quantize's scratch), and, while a block absmax is taken, three
    4-byte values per block (the largest, the smallest, their max); a 16-bit parameter (bf16-pure without master
    weights) adds fp32 copies of the chunk of itself and of its gradient (4L each). A tensor with fp32
    state needs only sqrt(v), 4 bytes a value (and the two copies). Fused AdamW on the CPU: the 0-dim
    tensor it wraps the step counters' "+1" in (none where the counters are on a GPU); foreach AdamW
    (other devices): sqrt(v), in the state's dtype.
    """
    copies = 2 if sixteen_bit_params else 0
    if optimizer == "adamw8bit":
        if numel < MIN_QUANTIZED:
            return (1 + copies) * 4 * numel
        chunk = min(CHUNK, numel)
        return (3 + copies) * 4 * chunk + 3 * 4 * n_blocks(chunk)
    if device in FUSED_ADAMW_DEVICES:
        return 4 if device == "cpu" else 0
    return (2 if sixteen_bit_params else 4) * numel


def optimizer_step_bytes(
    cfg: ModelConfig, optimizer: str, in_backward: bool, device: str, state_bytes_per_value: int, clip_norms: int
) -> int:
    """MemoryBreakdown.optimizer_step (fp16's found-inf flag aside) with AdamW8bit or the step in backward.

    The worst tensor's update temporaries (update_temporaries). An ordinary step first clips: clip_norms
    at their worst, then the total norm (one value in the gradients' dtype) held through the update; the
    step in backward does not clip (config refuses it).
    """
    return step_temporaries(_numels(cfg), optimizer, in_backward, device, state_bytes_per_value, clip_norms)


def step_temporaries(
    numels: list[int], optimizer: str, in_backward: bool, device: str, state_bytes_per_value: int, clip_norms: int
) -> int:
    """optimizer_step_bytes for any list of trained tensors, `numels` values each (a LoRA step's adapters, say).

    The worst tensor's update temporaries, and, in an ordinary step, clipping's norms or the total norm beside them.
    """
    sixteen_bit = state_bytes_per_value == 2
    worst = max(update_temporaries(n, optimizer, device, sixteen_bit) for n in numels)
    return worst if in_backward else max(clip_norms, state_bytes_per_value + worst)


def in_backward_step_bytes(
    cfg: ModelConfig, optimizer: str, device: str, model_bytes: int, master_weights: bool, embedding: bool
) -> int:
    """Bytes a hook of the step in backward holds while it steps: the gradient and the update's temporaries.

    For the embedding (`embedding`) or for the worst tensor of a block. With master weights the hook makes
    the fp32 copy's gradient beside the bf16 one (6 bytes a value), frees the bf16 one, then updates.
    """
    numels = _numels(cfg)  # parameter_shapes' order: the embedding, the blocks' tensors, the final norm's gain
    return hook_bytes(numels[:1] if embedding else numels[1:-1], optimizer, device, model_bytes, master_weights)


def hook_bytes(numels: list[int], optimizer: str, device: str, model_bytes: int, master_weights: bool = False) -> int:
    """in_backward_step_bytes for any list of trained tensors: the worst one's gradient and update temporaries.

    `model_bytes`: the trained tensors' dtype (a LoRA step's adapters are fp32, 4, whatever the precision).
    """
    sixteen_bit = model_bytes == 2 and not master_weights
    grad_bytes = 4 if master_weights else model_bytes
    copying = (model_bytes + 4) if master_weights else 0  # the moment the fp32 copy is made: both gradients
    return max(max(copying * n, grad_bytes * n + update_temporaries(n, optimizer, device, sixteen_bit)) for n in numels)


def largest_param(cfg: ModelConfig) -> int:
    """Values in the largest parameter tensor (the tied embedding, in every preset)."""
    return max(_numels(cfg))


def in_backward_gradient_bytes(cfg: ModelConfig, model_bytes: int, master_weights: bool) -> int:
    """The most gradient bytes alive at once with the step in backward: the largest parameter's gradient.

    With master weights its hook makes the fp32 copy's gradient (4 bytes a value) while the bf16 one (2) is
    still there: both, for that moment.
    """
    return largest_param(cfg) * (model_bytes + (4 if master_weights else 0))
