"""Fine-tuning a finished run: its weights as a starting point (--init-from), its model back, and export.

`--init-from RUN` starts a NEW run from RUN's weights with a fresh optimizer and schedule (not --resume,
which continues RUN itself). A LoRA run saves only its adapters, so it points at its base: the --init-from
path and the sha256 of the base's weights, checked whenever the base is loaded again (resume, sample,
export), so adapters are never put on weights they were not trained with.
`export` writes a plain checkpoint with the adapters merged in: W + (alpha / r) B @ A, one matrix per layer.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass, fields
from pathlib import Path

import torch

from minigpt.config import TrainConfig, without_lora
from minigpt.lora import add_adapters, has_adapters, initial_sha256, load_trainable, merged_state_dict, weights_sha256
from minigpt.model import GPT, ModelConfig
from minigpt.run_state import CheckpointError, first_line, load_checkpoint, save_checkpoint

# The settings a fine-tuning run takes from its source: they fix the model's shape and what token ids mean.
FROM_SOURCE = ("preset", "tokenizer", "n_layer", "n_embd", "n_head")  # the source's model, and how it reads text


@dataclass
class Source:
    """A finished run (or exported file) as a starting point: its settings and its plain GPT weights."""

    path: Path
    train_config: dict
    model_config: dict
    weights: dict[str, torch.Tensor]  # a plain GPT's state dict (a LoRA run's adapters merged in)
    step: int
    sha256: str  # weights_sha256(weights), taken as they were loaded

    def take_weights(self) -> dict[str, torch.Tensor]:
        """Hand the weights over (to the model built from them): the Source keeps no reference, so a tensor the
        model replaces (a base weight cast to bf16 or quantized) is freed at once instead of held twice."""
        weights, self.weights = self.weights, {}
        return weights


def checkpoint_file(path: str | Path, flag: str = "--init-from") -> Path:
    """A run folder's checkpoint.pt, or the file itself; FileNotFoundError naming `flag` if neither is there."""
    path = Path(path)
    file = path / "checkpoint.pt" if path.is_dir() else path
    if not file.is_file():
        where = f"{path} has no checkpoint.pt" if path.is_dir() else f"{path} does not exist"
        raise FileNotFoundError(f"{flag} {path}: {where}; give a finished run's folder (its --out) or an exported file")
    return file


def read_checkpoint(path: str | Path, flag: str = "--init-from", mmap: bool = False) -> dict:
    """load_checkpoint, with an error that names `flag` and leaves the file alone."""
    file = checkpoint_file(path, flag)
    try:
        return load_checkpoint(file, mmap=mmap)
    except CheckpointError as err:
        raise ValueError(f"{flag} {path}: cannot use {file}: {first_line(str(err).split(' (')[0], 100)}") from None


MADV_DONTNEED = 4  # madvise(2): drop these pages from the process (Linux and macOS use the same number)
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform != "win32" else None


def _copied_out_of_the_file(mapped: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Memory-mapped tensors (torch.load's mmap=True) copied into ordinary memory one at a time.

    A mapped page counts in the process's RSS from the moment it is read until the whole file is unmapped, so a
    plain copy would hold the weights twice. Each tensor's pages are dropped as soon as it is copied (they are
    clean: the file still has them). Tensors that share storage (the tied embedding) stay shared.
    """
    copies: dict[tuple, torch.Tensor] = {}
    for t in mapped.values():
        key = (t.data_ptr(), t.shape, t.stride())
        if key in copies:
            continue
        copies[key] = t.clone()
        page = 4096 if _LIBC is None else _LIBC.getpagesize()
        start = -(-t.data_ptr() // page) * page  # only whole pages inside this tensor: its neighbours keep theirs
        end = (t.data_ptr() + t.numel() * t.element_size()) // page * page
        if _LIBC is not None and end > start:
            _LIBC.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_DONTNEED)
    return {name: copies[(t.data_ptr(), t.shape, t.stride())] for name, t in mapped.items()}


def config_from(saved: dict) -> TrainConfig:
    """The TrainConfig a checkpoint was trained with (settings this minigpt does not know are left out)."""
    known = {f.name for f in fields(TrainConfig)}
    settings = {k: v for k, v in saved["train_config"].items() if k in known}
    if settings.get("lora_rank") is None:
        settings = without_lora(settings)
    return TrainConfig(**{**settings, "resume": False, "restart": False, "out": None, "save_every": 0})


def model_from(saved: dict, path: str | Path, device: torch.device | str = "cpu", flag: str = "--init-from") -> GPT:
    """The model a checkpoint holds: a plain GPT, or a LoRA run's base (its hash checked) with its adapters."""
    model_cfg = ModelConfig(**saved["model_config"])
    cfg = config_from(saved)
    model = GPT(model_cfg, seed=cfg.seed)
    if not cfg.lora_rank:
        model.load_state_dict(saved["model"])
        return model.to(device)
    base = saved.get("base") or {}
    if not (base.get("init_from") or cfg.init_from):  # trained without --init-from: the base is the seed's init
        if base.get("sha256") not in (None, weights_sha256(model.state_dict())):
            raise ValueError(
                f"{flag} {path}: its base, the random initialization of seed {cfg.seed}, is not what "
                "this version of minigpt makes from that seed; the adapters cannot be used with it"
            )
        source = None
    else:
        source = load_source(base.get("init_from") or cfg.init_from, flag=f"{flag} {path}: its base")
    if source is not None and source.sha256 != base.get("sha256"):
        raise ValueError(
            f"{flag} {path}: its base {source.path} has changed since the adapters were trained (sha256 "
            f"{source.sha256[:12]}, saved {str(base.get('sha256'))[:12]}); restore that run, or export the adapters "
            "before changing it"
        )
    if source is not None:
        model.load_state_dict(source.weights)
    model.to(device)
    add_adapters(
        model,
        cfg.lora_rank,
        cfg.lora_alpha,
        cfg.lora_targets,
        cfg.base_dtype,
        cfg.quant_block,
        cfg.train_norms,
        cfg.train_embedding,
        cfg.seed,
    )
    load_trainable(model, saved["model"])
    return model


def load_source(path: str | Path, flag: str = "--init-from") -> Source:
    """A run folder or exported file to start from: its settings and plain weights (a LoRA run's merged)."""
    saved = read_checkpoint(path, flag, mmap=True)  # mapped: the optimizer's state in the file is never read
    if "model_config" not in saved or "train_config" not in saved:
        raise ValueError(f"{flag} {path}: the checkpoint has no model or training settings; is it a minigpt run?")
    if config_from(saved).lora_rank:
        weights = merged_state_dict(model_from(saved, path, "cpu", flag))
    else:  # a plain GPT's state dict: copied as it is (build_step_state checks its names and shapes)
        weights = _copied_out_of_the_file(saved["model"])
    settings, step = (saved["train_config"], saved["model_config"]), saved.get("step", 0)
    del saved  # unmaps the file
    return Source(Path(path), *settings, weights, step, weights_sha256(weights))


def check_source(cfg: TrainConfig, source: Source) -> None:
    """The run must build the source's model and read its token ids the same way: one line per contradiction."""
    for name in FROM_SOURCE:
        given, theirs = getattr(cfg, name), source.train_config.get(name)
        if theirs is not None and given != theirs:
            flag = "--" + name.replace("_", "-")
            raise ValueError(
                f"{flag} {given} contradicts --init-from {source.path}, trained with {flag} {theirs}; "
                f"leave {flag} out (it comes from the source run) or give {theirs}"
            )
    mine = cfg.model_config()
    for name in ("n_layer", "n_embd", "n_head", "vocab_size"):
        theirs = source.model_config.get(name)
        if theirs is not None and getattr(mine, name) != theirs:
            raise ValueError(
                f"--init-from {source.path} is a model with {name} {theirs}, this run's has {getattr(mine, name)}; "
                "leave the shape flags out (the shape comes from the source run)"
            )


def base_entry(cfg: TrainConfig, source: Source | None) -> dict:
    """What a LoRA run's checkpoint says about its base: where it is and the sha256 of its weights (without
    --init-from: no path, the sha256 of the seed's random initialization, which sample and export make again)."""
    if not cfg.lora_rank:
        return {}
    if source is None:
        return {"base": {"init_from": None, "seed": cfg.seed, "sha256": initial_sha256(cfg.model_config(), cfg.seed)}}
    return {"base": {"init_from": str(source.path.resolve()), "sha256": source.sha256}}


def check_base(saved: dict, source: Source, run: str | Path) -> None:
    """On resume: the base a LoRA run's adapters were trained on must be the one loaded now."""
    expected = (saved.get("base") or {}).get("sha256")
    if expected is not None and expected != source.sha256:
        raise ValueError(
            f"cannot resume {run}: its base {source.path} has changed since the adapters were trained (sha256 "
            f"{source.sha256[:12]}, saved {expected[:12]}); resume with the original base run"
        )


def export(run: str | Path, out: str | Path) -> tuple[Path, bool]:
    """Write `run`'s model as a plain checkpoint (adapters merged); returns (path, whether it had adapters).

    The file loads anywhere a plain run's checkpoint does: `minigpt sample`, `--init-from`.
    """
    saved = read_checkpoint(run, "export")
    if "model_config" not in saved:
        raise ValueError(f"export {run}: the checkpoint has no model settings; is it a minigpt run?")
    out = Path(out)
    if out.exists():  # never over a file: it could be a run's checkpoint
        raise FileExistsError(f"export --out {out} already exists; choose another file name (nothing was written)")
    model = model_from(saved, run, "cpu", "export")
    adapted = has_adapters(model)
    cfg = saved["train_config"]
    plain = without_lora(cfg)
    snapshot = {
        "model": merged_state_dict(model) if adapted else model.state_dict(),
        "model_config": saved["model_config"],
        "train_config": plain,
        "step": saved.get("step", 0),
        "exported_from": str(Path(run).resolve()),
    }
    return save_checkpoint(snapshot, out), adapted
