import pytest

from minigpt.hardware import (
    GB,
    GIB,
    HARDWARE,
    MPS_USABLE_FRACTION,
    choose_precision,
    detect_hardware,
    get_hardware,
    gib,
)


def test_sizes_are_sold_in_gb_and_printed_in_gib():
    assert HARDWARE["t4"].memory_bytes == 16 * GB
    assert gib(16 * GB) == "14.90 GiB" and gib(GIB) == "1.00 GiB"


def test_precision_follows_the_hardware():
    assert choose_precision(HARDWARE["t4"])[0] == "fp16"  # no bf16: fp16 with a GradScaler
    assert choose_precision(HARDWARE["v100-32"])[0] == "fp16"
    for key in ("a100-40", "a100-80", "h100", "l4", "mps"):
        assert choose_precision(HARDWARE[key])[0] == "bf16"
    assert choose_precision(HARDWARE["cpu"])[0] == "fp32"
    precision, why = choose_precision(HARDWARE["t4"])
    assert "GradScaler" in why and HARDWARE["t4"].name in why


def test_mps_may_use_only_part_of_its_unified_memory():
    mac = HARDWARE["mps"]
    assert mac.usable_fraction == MPS_USABLE_FRACTION < 1
    assert mac.usable_memory_bytes == int(mac.memory_bytes * MPS_USABLE_FRACTION)
    assert HARDWARE["t4"].usable_memory_bytes == HARDWARE["t4"].memory_bytes


def test_get_hardware_by_key_or_itself_and_a_clear_error():
    assert get_hardware(" T4 ") is HARDWARE["t4"]
    assert get_hardware(HARDWARE["h100"]) is HARDWARE["h100"]
    with pytest.raises(ValueError, match="choose one of: t4"):
        get_hardware("tpu")


def test_detect_this_cpu():
    hw = detect_hardware("cpu")
    assert hw.key == "this" and hw.kind == "cpu" and hw.memory_bytes > 0
    assert not hw.supports_fp16  # no tensor cores on a CPU
    assert choose_precision(hw)[0] == ("bf16" if hw.supports_bf16 else "fp32")
