"""Timings that survive a shared machine, and speed conclusions computed from them.

Two defences against other programs stealing the CPU: measure this process's CPU time instead of the wall
clock (`clock`), and run the candidates in interleaved rounds, so a busy moment slows all of them alike and
shows up as spread between rounds instead of as a false winner (`interleaved_seconds`, `compare`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from minigpt.device import DeviceInfo, cpu_fp16_hardware


def clock(device: torch.device | str = "cpu") -> float:
    """Seconds for timing work on `device`.

    CPU: this process's CPU time, which other programs do not inflate. GPU: the wall clock after waiting for
    the GPU to finish what was queued (CUDA and MPS run asynchronously).
    """
    device = torch.device(device)
    if device.type == "cpu":
        return time.process_time()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
    return time.perf_counter()


def interleaved_seconds(
    candidates: dict[str, Callable[[], object]], rounds: int = 5, device: torch.device | str = "cpu", warmup: int = 1
) -> dict[str, list[float]]:
    """Seconds of one call of each candidate, per round: A B C, B C A, C A B, ... after `warmup` untimed rounds.

    Interleaving puts the candidates side by side in time, so a slow moment of the machine hits each of them.
    Each round starts one candidate later: what ran just before a candidate (a larger model that took the
    cache, say) changes from round to round, so it shows up as spread between the rounds, not as a bias.
    """
    if rounds < 1 or not candidates:
        raise ValueError(f"need at least one candidate and one round, got {len(candidates)} and {rounds}")
    for _ in range(warmup):
        for run in candidates.values():
            run()
    seconds: dict[str, list[float]] = {name: [] for name in candidates}
    names = list(candidates)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            run = candidates[name]
            start = clock(device)
            run()
            seconds[name].append(clock(device) - start)
    return seconds


@dataclass
class Ratio:
    """How many times faster `other` ran than `baseline`: the median of the per-round ratios, and their range."""

    median: float
    low: float
    high: float

    def within_noise(self) -> bool:
        """True when the rounds disagree on which one is faster (the range straddles 1.0)."""
        return self.low <= 1.0 <= self.high

    def __str__(self) -> str:
        return f"{self.median:.2f}x (rounds: {self.low:.2f}-{self.high:.2f}x)"


def compare(baseline: list[float], other: list[float]) -> Ratio:
    """Speed-up of `other` over `baseline` from seconds of the same interleaved rounds (>1: other is faster)."""
    if len(baseline) != len(other) or not baseline:
        raise ValueError(f"need the same non-zero number of rounds, got {len(baseline)} and {len(other)}")
    ratios = [b / o for b, o in zip(baseline, other, strict=True)]
    return Ratio(statistics.median(ratios), min(ratios), max(ratios))


def why_precision_speed(info: DeviceInfo, precision: str) -> str:
    """The device fact that explains a 16-bit speed: its bf16 instructions or tensor cores, or their absence."""
    low = "fp16" if precision.startswith("fp16") else "bf16"
    if info.type == "cpu":
        if low == "fp16":
            fp16 = cpu_fp16_hardware()
            if fp16:
                return f"fp16 instructions here: {', '.join(fp16)}"
            return "no fp16 instructions here (AVX512-FP16, AMX-FP16): fp16 is converted through fp32"
        return info.note  # "bf16 hardware: amx_bf16, ..." or "no bf16 instructions: bf16 is emulated"
    if info.type == "cuda":
        sm = f"sm_{info.compute_capability[0]}{info.compute_capability[1]}" if info.compute_capability else "GPU"
        if low == "bf16" and not info.bf16_is_fast:
            return f"{info.name} ({sm}) has no bf16 tensor cores"
        return f"{info.name} ({sm}) runs {low} matmuls on tensor cores"
    return f"{info.name}: {low} {'supported' if info.supports_bf16 or low == 'fp16' else 'not supported'}"


def speed_verdict(ratio: Ratio, what: str, baseline: str, info: DeviceInfo, precision: str) -> str:
    """One sentence computed from a measurement, e.g. "on this machine bf16 autocast is 2.0x faster than fp32 (...)".

    `what` names the faster-or-slower thing ("bf16 autocast"), `baseline` what it is compared with ("fp32").
    """
    reason = why_precision_speed(info, precision)
    if ratio.within_noise():
        return f"on this machine {what} is about as fast as {baseline}: {ratio}, within the noise ({reason})"
    if ratio.median >= 1.0:
        return f"on this machine {what} is {ratio.median:.1f}x faster than {baseline} ({ratio}; {reason})"
    return f"on this machine {what} is {1 / ratio.median:.1f}x slower than {baseline} ({ratio}; {reason})"
