"""TrainConfig: every setting of a run in one dataclass, checked when it is made; and the LR schedule.

The CLI, the notebooks and the tests all build a TrainConfig. A setting that cannot work raises
ValueError here, naming the flag, before anything slow starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from minigpt.loss import check_loss_chunks
from minigpt.model import PRESETS, ModelConfig, shaped_config
from minigpt.parallel import check_shard_mode
from minigpt.precision import normalize_precision
from minigpt.recompute import CHECKPOINTING_MODES
from minigpt.tokenizer import DEFAULT_TOKENIZER

OPTIMIZERS = ("adamw", "adamw8bit")  # --optimizer: minigpt/optim/adamw.py, minigpt/optim/adamw8bit.py


@dataclass
class TrainConfig:
    """Everything a run needs. The CLI, notebooks and tests all build one of these and call train()."""

    preset: str = "10m"
    n_layer: int | None = None  # override the preset's shape (None: the preset's); see model.shaped_config
    n_embd: int | None = None  # a width alone gets heads of the family's size, n_embd / 64
    n_head: int | None = None
    precision: str = "fp32"  # fp32 | bf16 | fp16 | bf16-pure (aliases: float32 | bfloat16 | float16)
    master_weights: bool = False  # bf16-pure only: keep fp32 master weights and optimizer state
    batch: int = 8  # micro-batch: sequences per forward/backward
    accum: int = 1  # micro-batches per optimizer step
    ctx: int | None = None  # tokens per sequence (default: the preset's maximum)
    checkpointing: str = "none"  # none | full | sqrt | selective
    compile: bool = False  # torch.compile the model (the first step compiles), and fuse AdamW8bit's step into one pass
    loss_chunks: int = 1  # the loss head in N token chunks: the (tokens x vocabulary) logits never exist whole
    offload_activations: bool = False  # what autograd saves goes to pinned host memory (CUDA) or temp files (CPU)
    offload_dir: str | None = None  # --offload-activations on a CPU: where the temp file goes (default: TMPDIR)
    shard: str = "none"  # none | zero1 | fsdp: what is split over the processes under torchrun (minigpt.distributed)
    dropout: float = 0.0
    steps: int = 100  # optimizer steps in total (a resumed run continues up to this number)
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int | None = None  # default: 5% of steps
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0  # max grad norm; 0 disables clipping
    optimizer: str = "adamw"  # adamw | adamw8bit: moments in fp32 (8 bytes a parameter) or 8-bit codes (about 2)
    optimizer_in_backward: bool = False  # step each parameter as soon as its gradient is complete, then free it
    eval_every: int = 0  # steps between val-loss evaluations (0: only at the end)
    eval_batches: int = 8
    save_every: int = 0  # steps between checkpoints (0: only at the end); needs `out`
    seed: int = 0
    corpus: str | None = None  # a UTF-8 text file; None: the built-in corpus --builtin-corpus
    builtin_corpus: str = "stories"  # stories | recipes (minigpt.corpus.CORPORA), used when there is no --corpus
    tokenizer: str = DEFAULT_TOKENIZER
    out: str | None = None  # run folder: checkpoint.pt and log.jsonl
    resume: bool = False
    restart: bool = False  # move the run in `out` aside (to OUT.old-N; nothing is deleted) and start a new one
    device: str = "auto"
    sample_tokens: int = 60  # tokens generated at the end (0: none)
    progress: bool | None = None  # tqdm bar; None: in a terminal or a notebook, else a log line now and then
    verbose: bool = True
    # Fine-tuning (minigpt.finetune, minigpt.lora): start from a finished run's weights; train adapters only
    init_from: str | None = None  # a finished run folder (or an exported file): its weights start this run
    lora_rank: int | None = None  # None: train every weight; R >= 1: freeze them and train rank-R adapters
    lora_alpha: float = 16.0  # the adapters' output is scaled by lora_alpha / lora_rank
    lora_targets: str = "attn"  # attn | mlp | all, or a comma list of qkv, proj, gate, up, down
    base_dtype: str = "fp32"  # LoRA: how the frozen block weights are stored: fp32 | bf16 | int8 | nf4
    quant_block: int = 64  # int8 / nf4: values per absmax scale (0: one scale per output channel)
    train_norms: bool = False  # LoRA: train the RMSNorm gains too
    train_embedding: bool = False  # LoRA: train the (tied) embedding too

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
        check_dropout(self.dropout)
        self.model_config()  # a shape that cannot work (--n-embd not divisible by --n-head, ...) stops here
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
        check_loss_chunks(self.loss_chunks, self.batch * self.ctx)
        if self.offload_dir is not None and not self.offload_activations:
            raise ValueError("--offload-dir applies to --offload-activations only; add it, or drop --offload-dir")
        check_optimizer(
            self.optimizer, self.optimizer_in_backward, self.precision, self.accum, self.grad_clip, self.shard
        )
        if self.master_weights and self.precision != "bf16-pure":
            raise ValueError("master_weights only applies to --precision bf16-pure (the others keep fp32 weights)")
        if (self.save_every or self.resume) and not self.out:
            raise ValueError("--resume and --save-every need --out, the run folder that holds checkpoint.pt")
        if self.out is not None and not str(self.out).strip():
            raise ValueError("--out is empty; name the run folder, or leave --out out to save nothing")
        if self.restart and (self.resume or not self.out):
            raise ValueError("--restart moves the run in --out aside to start a new one: it needs --out, not --resume")
        self.betas = tuple(self.betas)
        check_finetune(self)

    def model_config(self) -> ModelConfig:
        """The model this run trains: the preset, its shape overridden by n_layer / n_embd / n_head, and dropout."""
        return shaped_config(self.preset, self.n_layer, self.n_embd, self.n_head, dropout=self.dropout)

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else max(1, self.steps // 20)


def check_dropout(dropout: float) -> None:
    """--dropout is a probability below 1 (1 would zero every activation): one line if not."""
    if not 0 <= dropout < 1:  # (also catches nan)
        raise ValueError(f"--dropout must be in [0, 1), got {dropout}")


def check_optimizer(
    optimizer: str,
    in_backward: bool,
    precision: str = "fp32",
    accum: int = 1,
    grad_clip: float = 0.0,
    shard: str = "none",
) -> None:
    """Raise ValueError, one line naming the flags and why, for an optimizer setting that cannot work."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown --optimizer {optimizer!r}; choose one of: {', '.join(OPTIMIZERS)}")
    if optimizer == "adamw8bit" and shard != "none":
        raise ValueError(
            f"--optimizer adamw8bit with --shard {shard}: its 8-bit state is not split over processes; "
            "use --shard none, or --optimizer adamw"
        )
    refused = [
        (
            accum > 1,
            f"--accum {accum}: accumulation needs each gradient to survive the window's micro-batches, "
            "but the step in backward uses and frees it after the first; use --accum 1",
        ),
        (
            grad_clip > 0,
            f"--grad-clip {grad_clip:g}: clipping by the global norm needs every gradient before the "
            "first update, but the step in backward updates each parameter as soon as its own gradient is done; "
            "pass --grad-clip 0 (the grad norm is still logged)",
        ),
        (
            precision == "fp16",
            "--precision fp16: the GradScaler skips a step if ANY gradient overflows, known only "
            "at the end of backward, when the step in backward has already updated the parameters; use bf16",
        ),
        (
            shard != "none",
            f"--shard {shard}: the processes' gradients are reduced after they are complete, but the "
            "step in backward uses each one at once; use --shard none on one process",
        ),
    ]
    for cannot, why in refused:
        if in_backward and cannot:
            raise ValueError(f"--optimizer-in-backward with {why}")


def check_finetune(cfg: TrainConfig) -> None:
    """The fine-tuning settings: one line naming the flag and what to do for each that cannot work."""
    from minigpt.corpus import CORPORA  # here: the corpus package is only needed for this name check
    from minigpt.lora import parse_targets
    from minigpt.quantize import BASE_DTYPES, block_size

    if cfg.builtin_corpus not in CORPORA:
        raise ValueError(f"unknown --builtin-corpus {cfg.builtin_corpus!r}; choose one of: {', '.join(CORPORA)}")
    if cfg.corpus is not None and cfg.builtin_corpus != "stories":
        raise ValueError(f"--corpus {cfg.corpus} and --builtin-corpus {cfg.builtin_corpus}: give one of them")
    if cfg.init_from is not None and not str(cfg.init_from).strip():
        raise ValueError("--init-from is empty; give a finished run folder")
    check_lora_flags({name: getattr(cfg, name) for name in LORA_ONLY})
    if cfg.lora_rank is None:
        return
    width = cfg.model_config().n_embd  # every block layer is at least this wide in and out (--n-embd counts)
    if not 1 <= cfg.lora_rank <= width:
        raise ValueError(
            f"--lora-rank {cfg.lora_rank}: choose 1 to {width} (the {cfg.preset} layers' smallest width), "
            "or leave --lora-rank out to train every weight"
        )
    if not (math.isfinite(cfg.lora_alpha) and cfg.lora_alpha > 0):
        raise ValueError(f"--lora-alpha must be positive, got {cfg.lora_alpha}")
    parse_targets(cfg.lora_targets)
    if cfg.base_dtype not in BASE_DTYPES:
        raise ValueError(f"unknown --base-dtype {cfg.base_dtype!r}; choose one of: {', '.join(BASE_DTYPES)}")
    if cfg.quant_block < 0:
        raise ValueError(f"--quant-block must be 0 (per channel) or more, got {cfg.quant_block}")
    if cfg.base_dtype in ("int8", "nf4"):
        block_size((width, width), cfg.quant_block)
    check_lora_step(cfg.precision, cfg.shard)


def check_lora_step(precision: str, shard: str = "none", master_weights: bool = False) -> None:
    """The step settings LoRA cannot run with (bf16-pure, and so --master-weights; FSDP): one line each.

    Shared by training's config and `minigpt memory`, so the two refuse the same things with the same words.
    """
    if master_weights and precision != "bf16-pure":
        raise ValueError("master_weights only applies to --precision bf16-pure (the others keep fp32 weights)")
    if precision == "bf16-pure":
        raise ValueError(
            "--lora-rank with --precision bf16-pure: the frozen base's storage is --base-dtype and the adapters "
            "train in fp32 (so --master-weights, bf16-pure's, has nothing to do); use --precision bf16 (autocast) "
            "with --base-dtype bf16"
        )
    if shard == "fsdp":
        raise ValueError("--lora-rank with --shard fsdp: the frozen, quantized base is not sharded; use --shard none")


LORA_ONLY = ("lora_rank", "base_dtype", "train_norms", "train_embedding", "lora_alpha", "lora_targets", "quant_block")


def check_lora_flags(values: dict) -> None:
    """A LoRA flag that would do nothing is an error, not ignored: any of them without --lora-rank, and
    --quant-block with a base that is not quantized. values: {field: value} of LORA_ONLY's fields given."""
    defaults = {f.name: f.default for f in fields(TrainConfig)}
    flag = lambda name: "--" + name.replace("_", "-")  # noqa: E731
    if values.get("lora_rank") is None:
        for name, value in values.items():
            if name != "lora_rank" and value != defaults[name]:
                raise ValueError(f"{flag(name)} applies to LoRA only (everything trains without it); add --lora-rank R")
        return
    quantized = ("int8", "nf4")
    if values.get("base_dtype", defaults["base_dtype"]) not in quantized and values.get("quant_block", 64) != 64:
        raise ValueError(
            f"--quant-block sets the block of a quantized base (--base-dtype {' or '.join(quantized)}); the "
            f"{values.get('base_dtype', defaults['base_dtype'])} base has none: leave --quant-block out"
        )


def without_lora(settings: dict) -> dict:
    """A checkpoint's settings as a plain run's: every LoRA-only setting at its default (an export, or a run
    saved before check_lora_flags that kept, say, lora_alpha without a rank)."""
    defaults = {f.name: f.default for f in fields(TrainConfig)}
    return {**settings, **{name: defaults[name] for name in LORA_ONLY}}


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning-rate multiplier after `step` optimizer steps: linear warmup, then cosine decay."""
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
