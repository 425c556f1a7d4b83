"""What a model writes: text sampled after a prompt, from a model in memory or from a run on disk.

`minigpt sample RUN` loads a plain run, a LoRA run (its base, checked by hash, plus its adapters) or an
exported file, and prints what it writes: the quickest way to see what fine-tuning changed.
Sampling draws each next token from softmax(logits / temperature) over the top_k most likely tokens; the
generator is seeded, so the same seed writes the same text.
"""

from __future__ import annotations

from pathlib import Path

import torch

from minigpt.finetune import config_from, model_from, read_checkpoint
from minigpt.model import GPT
from minigpt.tokenizer import get_tokenizer

TEMPERATURE, TOP_K = 0.8, 50
MAX_SAMPLE_TOKENS = 10_000  # minutes on a laptop CPU at 10m, written as it goes; more is a loop, not a sample


def sample_text(
    model: GPT,
    tokenizer: str,
    n_tokens: int,
    device: torch.device,
    prompt: str = "",
    seed: int = 0,
    temperature: float = TEMPERATURE,
    top_k: int | None = TOP_K,
) -> str:
    """Generate `n_tokens` after `prompt` (or after <|endoftext|> when it is "") and return prompt + them."""
    enc = get_tokenizer(tokenizer)
    ids = enc.encode_ordinary(prompt) if prompt else [enc.eot_token]
    idx = torch.tensor([ids], device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    out = model.generate(idx, n_tokens, temperature=temperature, top_k=top_k, generator=gen)
    return prompt + enc.decode(out[0, len(ids) :].tolist())


def stream_text(
    model: GPT,
    tokenizer: str,
    n_tokens: int,
    device: torch.device,
    prompt: str = "",
    seed: int = 0,
    temperature: float = TEMPERATURE,
    top_k: int | None = TOP_K,
    every: int = 16,
):
    """sample_text's text in pieces, `every` tokens at a time: the prompt, then what each piece adds. The same seed
    writes the same text as sample_text (one generator draws every token in turn)."""
    enc = get_tokenizer(tokenizer)
    ids = enc.encode_ordinary(prompt) if prompt else [enc.eot_token]
    idx = torch.tensor([ids], device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    shown = ""
    yield prompt
    for start in range(0, n_tokens, every):
        idx = model.generate(idx, min(every, n_tokens - start), temperature=temperature, top_k=top_k, generator=gen)
        text = enc.decode(idx[0, len(ids) :].tolist())
        # A character split over two tokens decodes as U+FFFD until its second token comes: hold it back till then.
        ready = text if start + every >= n_tokens else text.rstrip("\ufffd")
        yield ready[len(shown) :]
        shown = ready


def check_sample_args(
    prompt: str | None, tokens: int, temperature: float, ctx: int, tokenizer: str, top_k: int = 0
) -> None:
    """One line for each setting `minigpt sample` cannot use."""
    if prompt is not None and not prompt.strip():
        raise ValueError("--prompt is empty; give some text, or leave --prompt out to start from <|endoftext|>")
    if not 1 <= tokens <= MAX_SAMPLE_TOKENS:
        raise ValueError(f"--tokens must be from 1 to {MAX_SAMPLE_TOKENS:,}, got {tokens:,}")
    if not 0 <= temperature < float("inf"):  # also catches nan
        raise ValueError(
            f"--temperature must be 0 (always the likeliest token) or a finite number above, got {temperature}"
        )
    if top_k < 0:
        raise ValueError(f"--top-k must be 0 (every token) or a positive count, got {top_k}")
    if prompt:
        n = len(get_tokenizer(tokenizer).encode_ordinary(prompt))
        if n > ctx:
            raise ValueError(f"--prompt is {n} tokens, longer than the model's ctx of {ctx}; shorten it")


def load_model(path: str | Path, device: torch.device | str = "cpu") -> tuple[GPT, str, str]:
    """(model, tokenizer, what it is) of a run folder or exported file: a plain run, a LoRA run, or an export."""
    saved = read_checkpoint(path, "sample")
    if "model_config" not in saved:
        raise ValueError(f"sample {path}: the checkpoint has no model settings; is it a minigpt run?")
    cfg = config_from(saved)
    model = model_from(saved, path, device, "sample")
    if cfg.lora_rank:
        what = f"LoRA run (rank {cfg.lora_rank} on {cfg.lora_targets}, base {cfg.base_dtype}) at step {saved['step']}"
    elif "exported_from" in saved:
        what = f"exported from {saved['exported_from']}"
    else:
        what = f"run at step {saved.get('step', 0)}"
    return model.eval(), cfg.tokenizer, what
