import datetime

import pytest
import torch

from minigpt import device as device_module
from minigpt.device import DeviceInfo, available_devices, device_info, doctor_rows, pick_device

HAS_CUDA = torch.cuda.is_available()
HAS_MPS = torch.backends.mps.is_available()


def test_auto_picks_cuda_then_mps_then_cpu():
    expected = "cuda" if HAS_CUDA else "mps" if HAS_MPS else "cpu"
    assert pick_device() == pick_device("auto") == torch.device(expected)
    assert available_devices()[-1] == "cpu"


def test_auto_order_with_simulated_devices(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device_module, "_mps_available", lambda: True)
    assert pick_device() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert pick_device() == torch.device("cuda")
    assert available_devices() == ["cuda:0", "cuda:1", "mps", "cpu"]


def test_cpu_is_always_honoured():
    assert pick_device("cpu") == pick_device(" CPU ") == torch.device("cpu")


@pytest.mark.skipif(HAS_CUDA, reason="needs a machine without a GPU")
def test_requesting_missing_cuda_says_what_is_available():
    for name in ("cuda", "cuda:1"):
        with pytest.raises(ValueError, match="not available.*Available: cpu") as info:
            pick_device(name)
        assert name in str(info.value)


@pytest.mark.skipif(HAS_MPS, reason="needs a machine without MPS")
def test_requesting_missing_mps_is_a_clear_error():
    with pytest.raises(ValueError, match="'mps' is not available"):
        pick_device("mps")


def test_bad_device_names():
    with pytest.raises(ValueError, match="not a device name"):
        pick_device("gpu")
    with pytest.raises(ValueError, match="not supported by this course"):
        pick_device("meta")


def test_cpu_device_info():
    info = device_info("cpu")
    assert isinstance(info, DeviceInfo) and info.type == "cpu" and info.name
    assert info.supports_bf16  # torch implements bf16 on every CPU (emulated through fp32 where no hardware)
    assert info.total_memory_bytes is None or info.total_memory_bytes > 2**20
    assert info.bf16_is_fast == bool(device_module.cpu_bf16_hardware())
    line = info.describe()
    assert line.startswith("cpu ") and "bf16: yes" in line and "fp16 autocast:" in line


def test_describe_for_a_simulated_t4():
    t4 = DeviceInfo(
        type="cuda",
        device="cuda:0",
        name="Tesla T4",
        total_memory_bytes=15 * 2**30,
        supports_bf16=False,
        bf16_is_fast=False,
        supports_fp16_autocast=True,
        compute_capability=(7, 5),
    )
    assert t4.describe() == "cuda:0 Tesla T4 (sm_75), 15.0 GiB, bf16: no, fp16 autocast: yes"


def test_doctor_rows():
    rows = dict(doctor_rows())
    assert torch.__version__ in rows["torch"]
    for key in (
        "python",
        "numpy",
        "tiktoken",
        "jupyter (jupyter_core)",
        "nbval",
        "matplotlib",
        "device picked",
        "device name",
        "device memory",
        "bf16",
        "fp16 autocast",
        "CPU threads",
    ):
        assert rows[key], key
    assert rows["device picked"].split(":")[0] == pick_device().type
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in doctor_rows())


def test_missing_package_reads_not_installed():
    assert device_module.package_version("no-such-package-minigpt") == "not installed"


def test_executed_on_names_the_cpu_its_16_bit_support_torch_and_the_date(monkeypatch):
    monkeypatch.setattr(device_module, "cpu_bf16_hardware", lambda: ["amx_bf16", "avx512_bf16"])
    monkeypatch.setattr(device_module.torch, "get_num_threads", lambda: 2)
    cpu = DeviceInfo("cpu", "cpu", "Intel(R) Xeon(R) Processor", None, True, True, True)
    line = device_module.executed_on(cpu, datetime.date(2026, 11, 24))
    assert line == (
        "Executed on Intel(R) Xeon(R) Processor (2 threads; bf16 native: amx_bf16, avx512_bf16; fp16 autocast: yes), "
        f"torch {torch.__version__}, 2026-11-24"
    )
    monkeypatch.setattr(device_module, "cpu_bf16_hardware", lambda: [])
    assert "bf16: emulated (no bf16 instructions)" in device_module.executed_on(cpu)
    monkeypatch.setattr(device_module.torch, "get_num_threads", lambda: 1)  # make chapters runs one thread
    assert "(1 thread; " in device_module.executed_on(cpu)


def test_executed_on_a_simulated_t4_says_no_bf16():
    t4 = DeviceInfo("cuda", "cuda:0", "Tesla T4", 15 * 2**30, False, False, True, compute_capability=(7, 5))
    line = device_module.executed_on(t4, datetime.date(2026, 1, 2))
    assert line.startswith("Executed on Tesla T4 (sm_75; bf16: no; fp16 autocast: yes), torch ")
    assert line.endswith(", 2026-01-02")


def test_executed_on_this_machine_is_one_line():
    line = device_module.executed_on()
    assert line.startswith("Executed on ") and "\n" not in line and "torch " in line


def test_doctor_says_plainly_what_an_older_torch_loses():
    """Colab ships its own torch, which may be older than the course's 2.7: doctor names what will not work."""
    from minigpt.device import torch_too_old, torch_version_tuple

    assert torch_version_tuple("2.5.1+cu121") == (2, 5) and torch_version_tuple("2.13.0") == (2, 13)
    assert torch_too_old("2.7.0") is None and torch_too_old("2.13.0+cpu") is None
    line = torch_too_old("2.5.1+cu121")
    assert "older than the course's 2.7" in line and "float8_e8m0fnu" in line and "get_total_norm" in line
    assert "F.rms_norm" not in line and "pip install -U 'torch>=2.7'" in line
    assert "nothing trains" in torch_too_old("2.3.0")
