"""Imported once, by the server the grader's workers are forked from (minigpt.grading.answers.PRELOAD), and by
nothing else: importing it runs a tiny version of what the exercises run.

The first optimizer step, autocast region, GradScaler, checkpoint or training run of a process costs seconds
of torch's lazy imports and set-up; the tenth costs milliseconds. Done here once, before any fork, every
worker starts with that work done, instead of paying it again for each exercise. It runs on one thread (a
process that forks must not have started a pool of threads), prints nothing, and a part that fails only
costs time.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from minigpt.data import TokenData
from minigpt.model import GPT, ModelConfig
from minigpt.train import TrainConfig, train


def _steps() -> None:
    """A tiny GPT's steps in every mode the exercises use."""
    model = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=32, ctx=16, vocab_size=64))
    x = torch.randint(0, 64, (2, 16))
    adamw, sgd = torch.optim.AdamW(model.parameters(), lr=1e-3), torch.optim.SGD(model.parameters(), lr=0.1)
    schedule = torch.optim.lr_scheduler.LambdaLR(sgd, lambda step: 1.0)
    scaler = torch.amp.GradScaler("cpu")
    for dtype, optimizer in ((torch.bfloat16, adamw), (torch.float16, sgd)):
        with torch.autocast("cpu", dtype=dtype):
            _, loss = model(x, x)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    schedule.step()
    h = model.tok_emb(x)
    for block in model.blocks:
        h = checkpoint(block, h, model.rope_cos, model.rope_sin, use_reentrant=False)
    h.sum().backward()


def _run() -> None:
    """One step of minigpt.train.train on the tiny preset."""
    tokens = np.random.default_rng(0).integers(0, 8192, size=4096).astype(np.uint16)
    data = TokenData(train=tokens[:3072], val=tokens[3072:], tokenizer="minigpt-8k", source="warm-up")
    cfg = TrainConfig(
        preset="tiny", steps=1, batch=1, ctx=16, device="cpu", progress=False, verbose=False, sample_tokens=0
    )
    train(cfg, data)


torch.set_num_threads(1)
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    for _warm in (_steps, _run):
        try:
            _warm()
        except Exception:  # noqa: BLE001 - a warm-up that fails costs time, nothing else
            pass
