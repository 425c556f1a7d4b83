"""minigpt.timing: interleaved rounds, ratios with their spread, and verdicts that follow the measurement."""

import pytest

from minigpt.device import DeviceInfo
from minigpt.timing import Ratio, clock, compare, interleaved_seconds, speed_verdict

AMX_CPU = DeviceInfo("cpu", "cpu", "Xeon", None, True, True, True, note="bf16 hardware: amx_bf16, avx512_bf16")
OLD_CPU = DeviceInfo("cpu", "cpu", "EPYC", None, True, False, True, note="no bf16 instructions: bf16 is emulated")
T4 = DeviceInfo("cuda", "cuda:0", "Tesla T4", 16 * 2**30, False, False, True, compute_capability=(7, 5))


def busy(n: int) -> None:
    sum(i * i for i in range(n))


def test_rounds_interleave_and_time_each_call():
    order = []
    seconds = interleaved_seconds(
        {"a": lambda: order.append("a"), "b": lambda: (order.append("b"), busy(200_000))}, rounds=3, warmup=1
    )
    assert order == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up, then a b, b a, a b: never a a a b b b
    assert [len(v) for v in seconds.values()] == [3, 3]
    # b does 200k multiply-adds in Python (milliseconds), a appends to a list (microseconds)
    assert min(seconds["b"]) > max(seconds["a"])


def test_clock_counts_cpu_work_not_sleep():
    import time

    start = clock("cpu")
    time.sleep(0.2)
    slept = clock("cpu") - start
    start = clock("cpu")
    busy(300_000)
    worked = clock("cpu") - start
    assert slept < 0.05 < 0.2  # sleeping uses no CPU: another program's load is not our time either
    assert worked > 0


def test_compare_is_the_median_of_per_round_ratios():
    ratio = compare([2.0, 2.0, 4.0], [1.0, 1.0, 1.0])
    assert (ratio.median, ratio.low, ratio.high) == (2.0, 2.0, 4.0)
    assert not ratio.within_noise()
    assert compare([1.0, 1.1], [1.05, 1.0]).within_noise()
    with pytest.raises(ValueError, match="same non-zero number of rounds"):
        compare([1.0], [1.0, 2.0])


def test_verdict_follows_the_measurement_and_names_the_reason():
    fast = speed_verdict(Ratio(2.0, 1.9, 2.1), "bf16 autocast", "fp32", AMX_CPU, "bf16")
    assert fast.startswith("on this machine bf16 autocast is 2.0x faster than fp32") and "amx_bf16" in fast
    slow = speed_verdict(Ratio(1 / 6, 0.15, 0.18), "bf16 autocast", "fp32", OLD_CPU, "bf16")
    assert "6.0x slower" in slow and "emulated" in slow
    even = speed_verdict(Ratio(1.02, 0.95, 1.08), "bf16 autocast", "fp32", AMX_CPU, "bf16")
    assert "about as fast" in even and "noise" in even
    t4 = speed_verdict(Ratio(0.9, 0.85, 0.95), "bf16 autocast", "fp32", T4, "bf16")
    assert "slower" in t4 and "no bf16 tensor cores" in t4
    fp16 = speed_verdict(Ratio(3.0, 2.8, 3.1), "fp16 autocast", "fp32", T4, "fp16")
    assert "3.0x faster" in fp16 and "tensor cores" in fp16


def test_the_fp16_verdict_on_a_cpu_names_what_this_cpu_has(monkeypatch):
    """The reason printed beside an fp16 timing is this CPU's flags, never a claim about every CPU."""
    from minigpt import timing
    from minigpt.device import DeviceInfo

    cpu = DeviceInfo("cpu", "cpu", "a CPU", 8 * 2**30, True, True, True)
    monkeypatch.setattr(timing, "cpu_fp16_hardware", lambda: [])
    assert timing.why_precision_speed(cpu, "fp16") == (
        "no fp16 instructions here (AVX512-FP16, AMX-FP16): fp16 is converted through fp32"
    )
    monkeypatch.setattr(timing, "cpu_fp16_hardware", lambda: ["amx_fp16", "avx512_fp16"])
    assert timing.why_precision_speed(cpu, "fp16") == "fp16 instructions here: amx_fp16, avx512_fp16"
