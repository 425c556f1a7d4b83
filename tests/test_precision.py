import pytest
import torch

from minigpt import precision
from minigpt.precision import (
    BYTES_PER_PARAM,
    PRECISIONS,
    PrecisionFacts,
    PrecisionNotSupportedError,
    autocast_context,
    autocast_dtype,
    check_precision,
    normalize_precision,
    precision_problem,
    static_bytes_per_param,
)

CPU = torch.device("cpu")

# ---------------------------------------------------------------------------------------- precision modes


def test_normalize_precision_aliases_and_errors():
    assert [normalize_precision(a) for a in ("float32", "bfloat16", "float16", "BF16", "bf16-pure")] == [
        "fp32",
        "bf16",
        "fp16",
        "bf16",
        "bf16-pure",
    ]
    with pytest.raises(ValueError, match="fp32, bf16, fp16, bf16-pure"):
        normalize_precision("fp8")


def test_autocast_dtype_and_context():
    assert [autocast_dtype(p) for p in PRECISIONS] == [None, torch.bfloat16, torch.float16, None]
    with autocast_context(CPU, "fp32"):
        assert torch.nn.functional.linear(torch.ones(2, 3), torch.ones(4, 3)).dtype == torch.float32
    with autocast_context(CPU, "bf16"):
        assert torch.nn.functional.linear(torch.ones(2, 3), torch.ones(4, 3)).dtype == torch.bfloat16


@pytest.mark.parametrize("name", ["fp32", "bf16", "bf16-pure"])
def test_check_precision_passes_on_this_cpu(name):
    check_precision(CPU, name)  # raises if the probe matmul did not come out in the requested dtype


def test_simulated_t4_refuses_bf16_and_names_the_alternative():
    t4 = PrecisionFacts(
        device="cuda:0",
        precision="bf16",
        compute_capability=(7, 5),
        device_name="Tesla T4",
        observed_dtype=torch.bfloat16,
    )  # emulation "works"
    message = precision_problem(t4)
    assert message == ("this GPU (Tesla T4, sm_75) has no bf16; use --precision fp16 (with GradScaler) or fp32")
    assert precision_problem(PrecisionFacts(**{**t4.__dict__, "precision": "bf16-pure"})) == message
    fp16_on_t4 = PrecisionFacts(**{**t4.__dict__, "precision": "fp16", "observed_dtype": torch.float16})
    assert precision_problem(fp16_on_t4) is None
    a100 = PrecisionFacts(**{**t4.__dict__, "compute_capability": (8, 0), "device_name": "A100"})
    assert precision_problem(a100) is None


def test_autocast_ignored_is_an_error_not_a_silent_fp32_run(monkeypatch):
    ignored = PrecisionFacts(
        device="mps",
        precision="bf16",
        observed_dtype=torch.float32,
        torch_warnings=["In MPS autocast, but the target dtype is not supported."],
    )
    message = precision_problem(ignored)
    assert "ignored" in message and "fp32" in message and "fp16 (with GradScaler)" in message
    assert "target dtype is not supported" in message

    # the same decision reached through check_precision, with the probe simulated
    monkeypatch.setattr(precision, "probe_precision", lambda device, p: ignored)
    with pytest.raises(PrecisionNotSupportedError, match="use --precision fp16"):
        check_precision(CPU, "bf16")


def test_autocast_unavailable_and_failed_probe_are_errors():
    no_autocast = PrecisionFacts(device="cpu", precision="fp16", autocast_available=False)
    assert "autocast is not available" in precision_problem(no_autocast)
    crashed = PrecisionFacts(device="mps", precision="bf16-pure", error="TypeError: BFloat16 unsupported")
    assert "BFloat16 unsupported" in precision_problem(crashed)
    assert issubclass(PrecisionNotSupportedError, ValueError)


def test_static_bytes_per_param():
    totals = [static_bytes_per_param(p)["total"] for p in PRECISIONS]
    assert totals == [16, 16, 16, 8]
    master = static_bytes_per_param("bf16-pure", master_weights=True)
    assert master == {"weights": 2, "master_weights": 4, "grads": 4, "optimizer": 8, "total": 18}
    assert static_bytes_per_param("bfloat16") == {**BYTES_PER_PARAM["bf16"], "total": 16}
    with pytest.raises(ValueError, match="bf16-pure only"):
        static_bytes_per_param("fp32", master_weights=True)


def test_check_precision_on_a_missing_cuda_is_a_clear_error():
    import pytest
    import torch

    from minigpt.precision import PrecisionNotSupportedError, check_precision

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(PrecisionNotSupportedError, match="no CUDA device"):
        check_precision("cuda", "bf16")
