"""AdamW with 8-bit moments: each moment is one byte per value, plus one fp32 scale per block of 256 values.

The moments' codes: minigpt/optim/codes.py (block-wise power codes, as in Dettmers et al. 2022).

Tensors under MIN_QUANTIZED values (the norm gains) keep fp32 moments, as bitsandbytes does: their
scales would cost as much as they save. The update runs over CHUNK values at a time, so the fp32 copies
of m and v it works on are a few chunks, never a whole embedding matrix (which would bring back at the
optimizer step the memory the codes saved).

The fused pass (AdamW8bit(compile=True), which --compile turns on). Eagerly, a chunk's update is some twenty passes
over fp32 tensors: decode m and v, update them and the weight, encode them again. On a CPU the step is one call of a
loop written in C that does it all a block at a time (minigpt/optim/kernel.py; kernel="c"). Elsewhere, and with
kernel="inductor" on a CPU too, torch.compile makes the pass from Python: fused_update_ writes the same
formulas as one function of a chunk viewed as [blocks, BLOCK]; torch.compile (inductor, C++ on a CPU) turns it into
two loops over the chunk's blocks, each split over the cores: the first takes each block's largest |m| and largest v
(the new scales, recomputing m and v from their codes and the gradient), the second updates m, v and the weight and
writes both moments' codes (see INDUCTOR_OPTIONS: no fp32 buffer as long as the chunk between them). Much of the
loops' time goes to square roots and divisions (a CPU's divider takes several cycles for one vector of them, where
it does several multiplications each cycle), so the pass is written to need few: three square roots and one division
a value (sqrt(v) once, m's code, v's code from sqrt(v)) where the eager formulas take four square roots, and no
division per vector by a block's scale (see fused_update_ and _decode for how). It compiles once per parameter
dtype, at the first step (seconds; the number of blocks is a dynamic size and the hyperparameters a tensor, so no
later step compiles again); a last block that is not whole, and tensors with fp32 moments, take the eager path. Its
results are the eager path's within a few fp32 ulps, not bitwise (eager rounds differently: fused multiply-adds,
divisions where the pass multiplies by a reciprocal, an inexact vectorized sqrt), and a code can then differ by one
where its value lies on a rounding tie (tests/test_optim.py derives the tolerance).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable

import torch

from minigpt.device import check_compile
from minigpt.optim.codes import BLOCK, M_CODE, V_CODE, PowerCode, dequantize, n_blocks, quantize_
from minigpt.optim.kernel import DTYPES, kernel_library, kernel_unavailable, update_checked_blocks

MIN_QUANTIZED = 4096  # tensors with fewer values keep fp32 moments (bitsandbytes' default threshold)
CHUNK = 2**20  # values updated at once (a multiple of BLOCK): the step's temporaries are a few chunks of fp32
QUANTIZED_KEYS = ("exp_avg_codes", "exp_avg_scales", "exp_avg_sq_codes", "exp_avg_sq_scales")
FP32_KEYS = ("exp_avg", "exp_avg_sq")
KERNELS = ("auto", "c", "inductor")  # how compile=True fuses the step (AdamW8bit's docstring)


def state_bytes(numel: int, min_quantized: int = MIN_QUANTIZED) -> int:
    """Bytes of both moments of one parameter tensor: 2 codes + 2 scales per block, or 8 bytes a value if small."""
    if numel < min_quantized:
        return 2 * 4 * numel
    return 2 * (numel + 4 * n_blocks(numel))


def adamw_update_(
    param: torch.Tensor,
    grad: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    step: int,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
    denom: torch.Tensor | None = None,
) -> torch.Tensor:
    """One AdamW update of fp32 tensors, in place, written as torch.optim.AdamW's for-loop version writes it.

    Returns the tensor of sqrt(v) it divided by (written into `denom` if given), which the caller may reuse
    as scratch.
    """
    beta1, beta2 = betas
    param.mul_(1 - lr * weight_decay)  # decoupled weight decay
    exp_avg.lerp_(grad, 1 - beta1)  # m = beta1 m + (1 - beta1) g
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)  # v = beta2 v + (1 - beta2) g^2
    bias_correction1, bias_correction2 = 1 - beta1**step, 1 - beta2**step  # the moments start at 0
    denom = torch.sqrt(exp_avg_sq, out=denom).div_(math.sqrt(bias_correction2)).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)
    return denom


def foreach_adamw_update_(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    step: int,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
) -> None:
    """adamw_update_ on a list of fp32 tensors at once: the same ops in the same order, each a torch._foreach op.

    On a CPU a foreach op runs its tensors' ordinary kernels one after the other, so every number is adamw_update_'s,
    bitwise; what it saves is Python: eight calls for all the small tensors, where one at a time took eight each.
    """
    beta1, beta2 = betas
    torch._foreach_mul_(params, 1 - lr * weight_decay)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
    bias_correction1, bias_correction2 = 1 - beta1**step, 1 - beta2**step
    denoms = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denoms, math.sqrt(bias_correction2))
    torch._foreach_add_(denoms, eps)
    torch._foreach_addcdiv_(params, exp_avgs, denoms, value=-lr / bias_correction1)


def _decode(codes: torch.Tensor, scales: torch.Tensor, code: PowerCode) -> torch.Tensor:
    """dequantize's arithmetic on [blocks, BLOCK] codes and their [blocks] scales, returning a new fp32 tensor."""
    x = codes.float()
    for _ in range(code.square_roots):
        x = x * (x.abs() if code.dtype.is_signed else x)
    # times the constant 1 / levels**power, where dequantize divides by it: within an ulp of it, and a compiled loop
    # then holds no division per vector (its per-block scalars are recomputed in the loop, not hoisted out of it)
    return x * (scales * (1.0 / code.levels**code.power))[:, None]


def fused_update_(
    param: torch.Tensor,
    grad: torch.Tensor,
    m_codes: torch.Tensor,
    m_scales: torch.Tensor,
    v_codes: torch.Tensor,
    v_scales: torch.Tensor,
    hyper: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole 8-bit AdamW update of whole blocks, written for torch.compile to make into one pass.

    Every tensor but the scales is a [blocks, BLOCK] view (param and grad of any float dtype); `hyper` holds
    hyper_parameters' seven numbers. dequantize, adamw_update_ and quantize_'s formulas, with other roundings
    (see the module docstring): the same results within a few fp32 ulps. Returns the blocks' 1 / scale of m and
    of sqrt(v), which the caller drops: as outputs, inductor computes them once a block into a small buffer,
    where otherwise its loops would divide once per vector of 16 values (a division costs about as much as a
    square root, and those take much of the loops' time).
    """
    tiny = torch.finfo(torch.float32).tiny
    m, v = _decode(m_codes, m_scales, M_CODE), _decode(v_codes, v_scales, V_CODE)
    g = grad.float()
    p = param.float() * hyper[0]  # decoupled weight decay
    m = m + hyper[1] * (g - m)  # m = beta1 m + (1 - beta1) g
    v = v * hyper[2] + hyper[3] * g * g  # v = beta2 v + (1 - beta2) g^2
    root = v.sqrt()
    param.copy_(p + (hyper[6] * m) / (root * hyper[4] + hyper[5]))  # the copy casts to a 16-bit param's dtype
    # m's code: round(127 * sign(m) * sqrt(|m| / scale)), its scale the block's largest |m|
    m_scale = m.abs().amax(dim=1)
    m_inverse = m_scale.clamp_min(tiny).reciprocal()
    m_codes.copy_((m.abs() * m_inverse[:, None]).sqrt().mul(M_CODE.levels).round().copysign(m))
    m_scales.copy_(m_scale)
    # v's code from sqrt(v): (v / s) ** (1/4) = sqrt(sqrt(v) / sqrt(s)), s the block's largest v (v >= 0: its largest
    # |v|), so one square root a value more; 1 / sqrt(s) is computed once a block
    v_scale = v.amax(dim=1)
    v_inverse = v_scale.clamp_min(tiny).sqrt().reciprocal()
    v_codes.copy_((root * v_inverse[:, None]).sqrt().mul(V_CODE.levels).round())
    v_scales.copy_(v_scale)
    return m_inverse, v_inverse


def hyper_parameters(step: int, lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> list:
    """adamw_update_'s numbers, as fused_update_ takes them: decay factor, 1 - beta1, beta2, 1 - beta2,
    1 / sqrt(bias correction 2), eps, -lr / bias correction 1."""
    beta1, beta2 = betas
    bias_correction1, bias_correction2 = 1 - beta1**step, 1 - beta2**step
    decay, step_size = 1 - lr * weight_decay, -lr / bias_correction1
    return [decay, 1 - beta1, beta2, 1 - beta2, 1 / math.sqrt(bias_correction2), eps, step_size]


# inductor's heuristic keeps in memory a value used twice that reads more than realize_reads_threshold (4) inputs:
# v (codes, scale, grad, two numbers) would be written as a chunk-long fp32 buffer by the loop that updates the
# weight and read back by a third loop for v's codes. Above 5 it is recomputed where it is used instead: the block
# maxima of m and v in a first loop, everything else in a second, no fp32 buffer (10-20% faster measured, and no
# temporary as large as the chunk). cpp.dynamic_threads: always an OpenMP region over torch's threads (inductor
# otherwise decides from its first call's size, and its disk cache kept a serial kernel made for a few blocks:
# 8.4M values on 2 cores, 11.4 ms -> 5.7 ms)
INDUCTOR_OPTIONS = {"realize_reads_threshold": 16, "cpp.dynamic_threads": True}


@functools.cache
def compiled_update() -> Callable:
    """torch.compile(fused_update_), made once: the first call with a new dtype compiles (seconds to a minute)."""
    return torch.compile(fused_update_, options=INDUCTOR_OPTIONS)


class AdamW8bit(torch.optim.Optimizer):
    """AdamW whose moments are 8-bit codes with an fp32 scale per block of BLOCK values (see the module docstring).

    The arithmetic is AdamW's, in fp32, on a chunk of CHUNK values at a time: dequantize the chunk's m and v,
    update them and the parameter, quantize them back. The step counter is a Python int per parameter.
    `compile`: one fused pass, refused with a clear error where it cannot work. `kernel` says which:
    "c", the hand-written loop of adamw8bit_kernel.c over every tensor's blocks in one call (CPU, Linux, a C
    compiler: minigpt.optim.kernel); "inductor", fused_update_ torch.compile'd, a call per chunk (any device
    torch.compile serves); "auto", "c" on a CPU where it can be built, else "inductor".
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        min_quantized: int = MIN_QUANTIZED,
        chunk: int = CHUNK,
        compile: bool = False,
        kernel: str = "auto",
    ) -> None:
        if chunk < BLOCK or chunk % BLOCK:
            raise ValueError(f"chunk must be a positive multiple of BLOCK ({BLOCK}), got {chunk}")
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
        if kernel != "auto" and not compile:
            raise ValueError(f"kernel={kernel!r} chooses how compile=True fuses the step: pass compile=True too")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self.min_quantized, self.chunk, self.compile, self.kernel = min_quantized, chunk, compile, kernel
        self._chunks: dict[torch.Tensor, tuple] = {}  # per parameter: _compiled_chunks' views, made once
        self._kernels = {}  # per device: "c" or "inductor" (a device added later by add_param_group: at its first step)
        if compile:
            for device in {p.device for group in self.param_groups for p in group["params"]}:
                self._kernels[device] = self._kernel_for(device, kernel)

    @staticmethod
    def _kernel_for(device: torch.device, kernel: str) -> str:
        """Which fused pass runs on `device`, "c" or "inductor", checked now: a clear error, and the C kernel built
        before any step."""
        if kernel == "c" or (kernel == "auto" and device.type == "cpu" and kernel_unavailable() is None):
            if device.type != "cpu":
                raise ValueError(f"AdamW8bit's C kernel runs on the CPU, not {device.type}: use kernel='inductor'")
            kernel_library()
            return "c"
        check_compile(device)
        return "inductor"

    def _new_state(self, p: torch.Tensor) -> dict:
        n, dev = p.numel(), p.device
        if n < self.min_quantized:
            zeros = lambda: torch.zeros(n, dtype=torch.float32, device=dev)  # noqa: E731
            return {"step": 0, "exp_avg": zeros(), "exp_avg_sq": zeros()}
        scales = lambda: torch.zeros(n_blocks(n), dtype=torch.float32, device=dev)  # noqa: E731
        return {
            "step": 0,
            "exp_avg_codes": torch.zeros(n, dtype=M_CODE.dtype, device=dev),
            "exp_avg_scales": scales(),
            "exp_avg_sq_codes": torch.zeros(n, dtype=V_CODE.dtype, device=dev),
            "exp_avg_sq_scales": scales(),
        }

    @torch.no_grad()
    def step(self, closure=None):
        """Update every parameter that has a gradient (the others are left alone, as torch's optimizers do)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        todo = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if not (p.is_contiguous() and p.grad.is_contiguous()) or p.grad.is_sparse:
                    raise ValueError("AdamW8bit needs dense, contiguous parameters and gradients")
                state = self.state[p]
                if not state:
                    state.update(self._new_state(p))
                state["step"] += 1
                todo.append((p, state, group))
        todo = self._update_small_fp32(todo)
        if todo:
            buffers, numbers = self._buffers(todo), {}
            todo = self._update_by_c_kernel(todo, buffers)
            for p, state, group in todo:
                self._update(p, state, group, buffers, numbers)
        return loss

    @staticmethod
    def _update_small_fp32(todo: list) -> list:
        """Update the fp32 parameters whose moments are fp32 (the small tensors) with foreach_adamw_update_, a
        list per set of hyperparameters; return the rest of `todo`. A 10m model has 21 such tensors: one at a
        time, their Python took about a tenth of the compiled step."""
        batches, rest = {}, []
        for p, state, group in todo:
            if "exp_avg" in state and p.dtype == torch.float32 and p.grad.dtype == torch.float32:
                key = (state["step"], group["lr"], group["betas"], group["eps"], group["weight_decay"])
                batches.setdefault(key, []).append((p, state))
            else:
                rest.append((p, state, group))
        for (step, lr, betas, eps, weight_decay), batch in batches.items():
            foreach_adamw_update_(
                [p.view(-1) for p, _ in batch],
                [p.grad.view(-1) for p, _ in batch],
                [state["exp_avg"] for _, state in batch],
                [state["exp_avg_sq"] for _, state in batch],
                step,
                lr,
                betas,
                eps,
                weight_decay,
            )
        return rest

    def _update_by_c_kernel(self, todo: list, buffers: list[torch.Tensor]) -> list:
        """Update the whole blocks of the quantized fp32 and bf16 tensors the C kernel serves in one call of it (a
        last block that is not whole eagerly); return the rest of `todo`."""
        work, rest = [], []
        for p, state, group in todo:
            if self._fused_by(p, state) != "c":
                rest.append((p, state, group))
                continue
            hyper = dict(step=state["step"], lr=group["lr"], betas=group["betas"], eps=group["eps"])
            hyper["weight_decay"] = group["weight_decay"]
            whole = p.numel() // BLOCK
            codes = [state[key] for key in QUANTIZED_KEYS]
            work.append((p, p.grad, *codes, whole, hyper_parameters(**hyper)))
            if whole * BLOCK < p.numel():
                self._eager_chunk(p, state, hyper, buffers, whole * BLOCK, p.numel())
        if work:  # checked: dtypes (_fused_by), contiguity (step), the state's shapes (_check_state)
            update_checked_blocks(work)
        return rest

    def _fused_by(self, p: torch.Tensor, state: dict) -> str | None:
        """Which fused pass updates p's whole blocks: "c", "inductor", or None (the eager path: no compile, fp32
        moments, or a weight or gradient dtype the C loop does not read)."""
        if not (self.compile and "exp_avg_codes" in state):
            return None
        if p.device not in self._kernels:
            self._kernels[p.device] = self._kernel_for(p.device, self.kernel)
        kernel = self._kernels[p.device]
        if kernel == "c" and not (p.dtype in DTYPES and p.grad.dtype in DTYPES):
            return None
        return kernel

    def _buffers(self, todo: list) -> list[torch.Tensor]:
        """The fp32 tensors every chunk of this step works in: m, v and sqrt(v) (only sqrt(v) if no moment is
        quantized), each as long as the largest chunk. Made once per step, not per chunk: a new tensor of a few
        MiB is fresh memory, mapped page by page as it is first written (on a CPU, an allocating sqrt took
        several times as long as an in-place one). The peak is the same: the worst tensor's chunk needs all three."""
        length = max(self._eager_length(p, state) for p, state, _ in todo)
        count = 3 if any("exp_avg_codes" in state for _, state, _ in todo) else 1
        return [torch.empty(length, dtype=torch.float32, device=todo[0][0].device) for _ in range(count)]

    def _eager_length(self, p: torch.Tensor, state: dict) -> int:
        """The most values of `p` that one chunk of the eager path updates: a chunk, or (compiled) what the
        fused pass leaves, a last block that is not whole or a last chunk of a single block (under 2 * BLOCK)."""
        if self._fused_by(p, state):
            return min(p.numel(), 2 * BLOCK - 1)
        return min(self.chunk, p.numel())

    def _update(
        self, p: torch.Tensor, state: dict, group: dict, buffers: list[torch.Tensor], numbers: dict[tuple, torch.Tensor]
    ) -> None:
        """One parameter's update: eagerly, or (compiled) its whole blocks by the fused pass, a chunk a call.

        `numbers`: this step's hyperparameter tensors by their values, shared by the parameters whose numbers are
        the same (a group's, at one step count): one small tensor a step, not one a parameter."""
        hyper = dict(step=state["step"], lr=group["lr"], betas=group["betas"], eps=group["eps"])
        hyper["weight_decay"] = group["weight_decay"]
        if self._fused_by(p, state) != "inductor":
            for start in range(0, p.numel(), self.chunk):
                self._eager_chunk(p, state, hyper, buffers, start, min(start + self.chunk, p.numel()))
            return
        # the numbers as a tensor: torch.compile would make floats constants and compile again for each lr
        key = (p.device, *hyper_parameters(**hyper))
        if key not in numbers:
            numbers[key] = torch.tensor(key[1:], dtype=torch.float32, device=p.device)
        whole = p.numel() // BLOCK  # whole blocks; the last block, if partial, goes the eager way
        grad_rows = p.grad.view(-1)[: whole * BLOCK].view(-1, BLOCK)
        for first, last, chunk in self._compiled_chunks(p, state):
            if chunk is None:  # one block: torch.compile would compile a shape for it alone
                self._eager_chunk(p, state, hyper, buffers, first * BLOCK, last * BLOCK)
                continue
            grad = grad_rows[first:last]
            torch._dynamo.maybe_mark_dynamic(grad, 0)
            compiled_update()(chunk[0], grad, *chunk[1:], numbers[key])
        if whole * BLOCK < p.numel():
            self._eager_chunk(p, state, hyper, buffers, whole * BLOCK, p.numel())

    def _compiled_chunks(self, p: torch.Tensor, state: dict) -> list[tuple[int, int, list | None]]:
        """(first block, last block, views) of each chunk of p's whole blocks: [blocks, BLOCK] views of the parameter
        and the codes, and the blocks' scales, their number of blocks marked dynamic (one compile for any number);
        views None for a chunk of a single block. Made at the first step and kept while the tensors are the same
        ones (a load_state_dict makes new codes): slicing and marking a view costs microseconds, a step makes
        hundreds of them."""
        tensors = (p, state["exp_avg_codes"], state["exp_avg_scales"], state["exp_avg_sq_codes"])
        tensors += (state["exp_avg_sq_scales"],)
        identity = tuple(t.data_ptr() for t in tensors)
        cached = self._chunks.get(p)
        if cached is not None and cached[0] == identity:
            return cached[1]
        whole = p.numel() // BLOCK
        rows = [t.view(-1)[: whole * BLOCK].view(-1, BLOCK) for t in (p, state["exp_avg_codes"])]
        rows += [state["exp_avg_scales"], state["exp_avg_sq_codes"][: whole * BLOCK].view(-1, BLOCK)]
        rows.append(state["exp_avg_sq_scales"])
        chunks, step = [], self.chunk // BLOCK
        for first in range(0, whole, step):
            last = min(first + step, whole)
            views = [t[first:last] for t in rows] if last - first >= 2 else None
            for t in views or []:
                torch._dynamo.maybe_mark_dynamic(t, 0)
            chunks.append((first, last, views))
        self._chunks[p] = (identity, chunks)
        return chunks

    def _eager_chunk(
        self, p: torch.Tensor, state: dict, hyper: dict, buffers: list[torch.Tensor], start: int, end: int
    ) -> None:
        """Values start:end of p (start a multiple of BLOCK): dequantize, adamw_update_, quantize_ (eager ops)."""
        flat_p, flat_g = p.view(-1), p.grad.view(-1)
        quantized = "exp_avg_codes" in state
        blocks = slice(start // BLOCK, n_blocks(end))
        param = flat_p[start:end].float()  # the parameter itself when it is fp32: updated in place
        grad = flat_g[start:end].float()
        scratch = buffers[-1][: end - start]  # sqrt(v), then the quantize's scratch
        if quantized:
            m_codes, m_scales = state["exp_avg_codes"][start:end], state["exp_avg_scales"][blocks]
            v_codes, v_scales = state["exp_avg_sq_codes"][start:end], state["exp_avg_sq_scales"][blocks]
            m = dequantize(m_codes, m_scales, M_CODE, out=buffers[0][: end - start], scratch=scratch)
            v = dequantize(v_codes, v_scales, V_CODE, out=buffers[1][: end - start])
        else:
            m, v = state["exp_avg"][start:end], state["exp_avg_sq"][start:end]
        adamw_update_(param, grad, m, v, **hyper, denom=scratch)
        if param.data_ptr() != flat_p.data_ptr() + start * flat_p.element_size():  # a 16-bit parameter
            flat_p[start:end].copy_(param)
        if quantized:
            quantize_(m, M_CODE, m_codes, m_scales, scratch)
            quantize_(v, V_CODE, v_codes, v_scales, scratch)

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's load, then the saved tensors put back as they were: torch would cast the codes to the
        parameter's dtype (and the scales to bf16 under bf16-pure)."""
        super().load_state_dict(state_dict)
        self._chunks.clear()  # views of the old codes: dropped, so those are freed now
        params = [p for group in self.param_groups for p in group["params"]]
        for index, saved in state_dict["state"].items():
            p = params[index]
            keys = QUANTIZED_KEYS if p.numel() >= self.min_quantized else FP32_KEYS
            if set(saved) != {"step", *keys}:
                raise ValueError(
                    f"this optimizer state is not AdamW8bit's (parameter {index} holds {', '.join(sorted(saved))}); "
                    "resume with the optimizer that saved it"
                )
            self.state[p] = {k: v.to(p.device) if torch.is_tensor(v) else v for k, v in saved.items()}
            self._check_state(index, p, self.state[p])

    @staticmethod
    def _check_state(index: int, p: torch.Tensor, state: dict) -> None:
        """Refuse a loaded state whose tensors are not the ones this parameter's state is made of (a checkpoint of
        another model, or edited): the compiled step would read and write past their ends."""
        n = p.numel()
        expected = {"exp_avg": (torch.float32, n), "exp_avg_sq": (torch.float32, n)}
        expected.update(exp_avg_codes=(M_CODE.dtype, n), exp_avg_sq_codes=(V_CODE.dtype, n))
        expected.update(exp_avg_scales=(torch.float32, n_blocks(n)), exp_avg_sq_scales=(torch.float32, n_blocks(n)))
        for key, tensor in state.items():
            if key != "step" and ((tensor.dtype, tensor.numel()) != expected[key] or not tensor.is_contiguous()):
                raise ValueError(
                    f"parameter {index}'s saved {key} is {tensor.numel()} {tensor.dtype} values, where this parameter "
                    f"({n} values) needs {expected[key][1]} {expected[key][0]}: the state is another model's"
                )
