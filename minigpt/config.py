"""TrainConfig: every setting of a run in one dataclass, checked when it is made; and the LR schedule.

The CLI, the notebooks and the tests all build a TrainConfig. A setting that cannot work raises
ValueError here, naming the flag, before anything slow starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from minigpt.model import PRESETS
from minigpt.parallel import check_shard_mode
from minigpt.precision import normalize_precision
from minigpt.recompute import CHECKPOINTING_MODES
from minigpt.tokenizer import DEFAULT_TOKENIZER


@dataclass
class TrainConfig:
    """Everything a run needs. The CLI, notebooks and tests all build one of these and call train()."""

    preset: str = "10m"
    precision: str = "fp32"  # fp32 | bf16 | fp16 | bf16-pure (aliases: float32 | bfloat16 | float16)
    master_weights: bool = False  # bf16-pure only: keep fp32 master weights and optimizer state
    batch: int = 8  # micro-batch: sequences per forward/backward
    accum: int = 1  # micro-batches per optimizer step
    ctx: int | None = None  # tokens per sequence (default: the preset's maximum)
    checkpointing: str = "none"  # none | full | sqrt | selective
    compile: bool = False  # torch.compile the model: faster steps, fewer saved activations; the first step compiles
    shard: str = "none"  # none | zero1 | fsdp: what is split over the processes under torchrun (minigpt.distributed)
    dropout: float = 0.0
    steps: int = 100  # optimizer steps in total (a resumed run continues up to this number)
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int | None = None  # default: 5% of steps
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0  # max grad norm; 0 disables clipping
    eval_every: int = 0  # steps between val-loss evaluations (0: only at the end)
    eval_batches: int = 8
    save_every: int = 0  # steps between checkpoints (0: only at the end); needs `out`
    seed: int = 0
    corpus: str | None = None  # a UTF-8 text file; None: the built-in stories
    tokenizer: str = DEFAULT_TOKENIZER
    out: str | None = None  # run folder: checkpoint.pt and log.jsonl
    resume: bool = False
    device: str = "auto"
    sample_tokens: int = 60  # tokens generated at the end (0: none)
    progress: bool | None = None  # tqdm bar; None: in a terminal or a notebook, else a log line now and then
    verbose: bool = True

    def __post_init__(self) -> None:
        self.precision = normalize_precision(self.precision)
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of: {', '.join(PRESETS)}")
        if self.checkpointing not in CHECKPOINTING_MODES:
            raise ValueError(
                f"unknown checkpointing {self.checkpointing!r}; choose one of: {', '.join(CHECKPOINTING_MODES)}"
            )
        max_ctx = PRESETS[self.preset].ctx
        self.ctx = max_ctx if self.ctx is None else self.ctx
        for name in ("batch", "accum", "ctx", "steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be at least 1, got {getattr(self, name)}")
        for name in ("eval_every", "save_every", "sample_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be 0 or more, got {getattr(self, name)}")
        if self.eval_batches < 1:
            raise ValueError(f"eval_batches must be at least 1, got {self.eval_batches}")
        if not (math.isfinite(self.lr) and self.lr > 0):  # "not (... > 0)" also catches nan
            raise ValueError(f"--lr must be positive, got {self.lr}")
        if not (math.isfinite(self.grad_clip) and self.grad_clip >= 0):
            raise ValueError(f"--grad-clip must be 0 (no clipping) or a positive max norm, got {self.grad_clip}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"--dropout must be in [0, 1), got {self.dropout}")
        if not 0 <= self.min_lr_ratio <= 1 or not self.weight_decay >= 0:
            raise ValueError(
                f"need 0 <= min_lr_ratio <= 1 and weight_decay >= 0, got {self.min_lr_ratio}, {self.weight_decay}"
            )
        if not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas must be in [0, 1), got {self.betas}")
        if not 0 <= self.seed < 2**64:
            raise ValueError(f"--seed must be between 0 and 2**64 - 1, got {self.seed}")
        if self.warmup_steps is not None and not 0 <= self.warmup_steps <= self.steps:
            raise ValueError(f"--warmup-steps must be between 0 and --steps ({self.steps}), got {self.warmup_steps}")
        if self.ctx > max_ctx:
            raise ValueError(f"--ctx {self.ctx} is above the {self.preset} preset's maximum of {max_ctx}")
        check_shard_mode(self.shard)
        if self.master_weights and self.precision != "bf16-pure":
            raise ValueError("master_weights only applies to --precision bf16-pure (the others keep fp32 weights)")
        if (self.save_every or self.resume) and not self.out:
            raise ValueError("--resume and --save-every need --out, the run folder that holds checkpoint.pt")
        self.betas = tuple(self.betas)

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else max(1, self.steps // 20)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning-rate multiplier after `step` optimizer steps: linear warmup, then cosine decay."""
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
