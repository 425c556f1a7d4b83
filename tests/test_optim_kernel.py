"""The 8-bit step's C loop (minigpt/optim/kernel.py, adamw8bit_kernel.c): its numbers, its checks, its build.

Its agreement with the eager step over whole optimizer steps (fp32 and bf16 weights, a partial last block,
fp32 moments beside it) is tests/test_optim.py's compiled-step test, run for both kernels.
"""

import functools
import re

import pytest
import torch

from minigpt.optim import adamw8bit, kernel
from minigpt.optim.adamw8bit import AdamW8bit, hyper_parameters
from minigpt.optim.codes import BLOCK, M_CODE, V_CODE, quantize


@pytest.fixture(scope="module", autouse=True)
def built():
    reason = kernel.kernel_unavailable()
    if reason:
        pytest.skip(reason)
    kernel.kernel_library()


def row(values: int, gen: torch.Generator, dtype=torch.float32, grad: torch.Tensor | None = None) -> tuple:
    """One tensor's work: a weight, a gradient and moments quantized from a plausible m and v, whole blocks."""
    param = torch.randn(values, generator=gen).to(dtype)
    grad = torch.randn(values, generator=gen).to(dtype) if grad is None else grad
    m_codes, m_scales = quantize(0.1 * torch.randn(values, generator=gen), M_CODE)
    v_codes, v_scales = quantize(0.01 * torch.rand(values, generator=gen) ** 2, V_CODE)
    return param, grad, m_codes, m_scales, v_codes, v_scales, values // BLOCK


def cloned(work: list[tuple]) -> list[tuple]:
    return [tuple(t.clone() if torch.is_tensor(t) else t for t in r) for r in work]


def test_the_loop_and_python_share_the_block_size():
    source = kernel.SOURCE.read_text()
    assert int(re.search(r"#define BLOCK (\d+)", source).group(1)) == BLOCK


def test_the_threads_split_blocks_without_changing_a_number():
    """Each block is computed by one thread from its own values: one thread or two give the same bits."""
    gen = torch.Generator().manual_seed(0)
    hyper = hyper_parameters(3, 1e-2, (0.9, 0.999), 1e-8, 0.1)
    work = [(*row(n, gen, dtype), hyper) for n, dtype in ((64 * BLOCK, torch.float32), (9 * BLOCK, torch.bfloat16))]
    one, two = cloned(work), cloned(work)
    kernel.update_whole_blocks(one, threads=1)
    kernel.update_whole_blocks(two, threads=2)
    for a, b, start in zip(one, two, work):
        assert not torch.equal(a[0], start[0])  # it did update
        for x, y in zip(a[:6], b[:6]):
            assert torch.equal(x, y)


# The loop's code_sqrt has three forms, chosen when it is compiled: AVX-512's 14-bit estimate, AVX's 12-bit one,
# or the exact sqrtf elsewhere (an ARM CPU, say). Each is built here by turning the instruction sets off.
CODE_SQRT_FORMS = {"this CPU": (), "AVX, no AVX-512": ("-mno-avx512f",), "no AVX": ("-mno-avx",)}


@pytest.fixture(scope="module", params=list(CODE_SQRT_FORMS))
def loop_form(request, tmp_path_factory):
    """The loop built with one form of code_sqrt (where this CPU has its instruction sets; else skipped)."""
    flags = CODE_SQRT_FORMS[request.param]
    if "-mno-avx512f" in flags and not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        pytest.skip("this CPU has no AVX-512: its own build is the AVX form")
    path = tmp_path_factory.mktemp("form") / "adamw8bit.so"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernel, "FLAGS", (*kernel.FLAGS, *flags))
        kernel.build(kernel.c_compiler(), path)
    return kernel.load(path)


def test_the_codes_square_roots_are_within_the_stated_bound(loop_form, monkeypatch):
    """With 1 - beta1 = 1, beta2 = 0 and 1 - beta2 = 1, m = g and v = g^2, so both codes round a known number:
    127 sqrt(|g| / max|g|) and 255 sqrt(sqrt(g^2) / sqrt(max g^2)) = 255 sqrt(|g| / max|g|). code_sqrt's error:
    the estimate of 1/sqrt is within e = 1.5 * 2**-12 (AVX; AVX-512's 2**-14), one Newton step leaves 1.5 e**2
    < 2**-22, and its five roundings add at most 5 * 2**-24 (the exact sqrtf: half an ulp); the fp32 quotient it
    takes the root of adds 2**-24 more: under 2**-20 in all. A code's argument, at most 255, is then off by under
    255 * 2**-20 = 2.5e-4. So every code is exact (the float64 rounding) except where the exact argument lies
    within 2.5e-4 of a half-integer, and there it is off by one at most."""
    gen = torch.Generator().manual_seed(1)
    grad, blocks = torch.randn(256 * BLOCK, generator=gen), 256
    m_codes, v_codes = torch.zeros(grad.numel(), dtype=torch.int8), torch.zeros(grad.numel(), dtype=torch.uint8)
    m_scales, v_scales = torch.zeros(blocks), torch.zeros(blocks)  # zero moments: m = 0 + 1 * (g - 0) is g exactly
    hyper = [1.0, 1.0, 0.0, 1.0, 1.0, 1e-8, 0.0]  # decay 1, m = g, v = g^2, the weight untouched
    monkeypatch.setattr(kernel, "kernel_library", lambda: loop_form)
    kernel.update_whole_blocks([(torch.zeros_like(grad), grad, m_codes, m_scales, v_codes, v_scales, blocks, hyper)])
    g = grad.double().view(-1, BLOCK).abs()
    ratio = (g / g.amax(dim=1, keepdim=True)).sqrt().view(-1)
    assert torch.equal(m_scales, grad.view(-1, BLOCK).abs().amax(dim=1))
    assert torch.equal(v_scales, (grad * grad).view(-1, BLOCK).amax(dim=1))
    for codes, levels in ((m_codes.int().abs(), 127), (v_codes.int(), 255)):
        argument = levels * ratio
        exact = torch.round(argument).int()
        off = codes != exact
        assert ((codes - exact).abs() <= 1).all()
        assert ((argument[off] % 1 - 0.5).abs() < 2.5e-4).all(), "a code is off away from a tie"
        assert off.float().mean() < 1e-3  # and those are rare
    assert torch.equal(m_codes.sign(), grad.sign().to(torch.int8) * (m_codes != 0))  # m's sign kept


def test_a_bf16_weight_is_rounded_to_nearest_even_as_torch_rounds_it():
    """A step of size 0 leaves weight * decay: computed in fp32 and rounded to bf16, bit for bit torch's rounding
    of the same fp32 product (ties to even)."""
    gen = torch.Generator().manual_seed(2)
    param, *rest = row(32 * BLOCK, gen, torch.bfloat16)
    decay = 1 - 1e-3 * 0.37
    expected = (param.float() * torch.tensor(decay, dtype=torch.float32)).to(torch.bfloat16)
    kernel.update_whole_blocks([(param, *rest, [decay, 0.1, 0.999, 0.001, 1.0, 1e-8, 0.0])])
    assert torch.equal(param, expected)


def test_a_block_of_zeros_stays_zeros_without_a_nan():
    """Zero gradients into zero moments: no 0/0 in the scales' inverses, no 0 * infinity in the codes' roots."""
    values = 4 * BLOCK
    param = torch.ones(values)
    m_codes, v_codes = torch.zeros(values, dtype=torch.int8), torch.zeros(values, dtype=torch.uint8)
    m_scales, v_scales = torch.zeros(4), torch.zeros(4)
    hyper = hyper_parameters(1, 1e-3, (0.9, 0.999), 1e-8, 0.0)
    kernel.update_whole_blocks([(param, torch.zeros(values), m_codes, m_scales, v_codes, v_scales, 4, hyper)])
    assert torch.equal(param, torch.ones(values))
    assert not m_codes.any() and not v_codes.any() and not m_scales.any() and not v_scales.any()


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: (r[0].half(), *r[1:]), "fp32 or bf16 weight"),
        (lambda r: (*r[:2], r[2].to(torch.uint8), *r[3:]), "int8 codes of m"),
        (lambda r: (*r[:6], r[6] + 1, r[7]), "whole blocks"),
        (lambda r: (*r[:3], r[3][:-1], *r[4:]), "whole blocks"),
        (lambda r: (*r[:7], r[7][:6]), "seven numbers"),
        (lambda r: (torch.zeros(2 * r[0].numel())[::2], *r[1:]), "contiguous"),
    ],
)
def test_bad_work_is_refused_before_the_loop_reads_any_address(change, message):
    gen = torch.Generator().manual_seed(3)
    good = (*row(2 * BLOCK, gen), hyper_parameters(1, 1e-3, (0.9, 0.999), 1e-8, 0.0))
    bad = change(good)
    before = [t.clone() for t in (*good[:6], *bad[:6])]
    with pytest.raises(ValueError, match=message):
        kernel.update_whole_blocks([good, bad])
    assert all(torch.equal(a, b) for a, b in zip(before, (*good[:6], *bad[:6])))  # nothing written, not even good


def test_a_loaded_state_of_another_shape_is_refused():
    """The loop trusts the state's sizes: a checkpoint whose codes are shorter than the weight is refused at load."""
    small, large = torch.nn.Parameter(torch.zeros(2 * BLOCK * 8)), torch.nn.Parameter(torch.zeros(4 * BLOCK * 8))
    saver = AdamW8bit([small])
    small.grad = torch.ones_like(small)
    saver.step()
    loader = AdamW8bit([large], compile=True, kernel="c")
    with pytest.raises(ValueError, match="another model's"):
        loader.load_state_dict(saver.state_dict())


def test_compile_picks_the_c_loop_on_this_cpu_and_inductor_when_asked():
    p = torch.nn.Parameter(torch.zeros(BLOCK * 16))
    assert AdamW8bit([p], compile=True)._kernels == {torch.device("cpu"): "c"}
    assert AdamW8bit([p], compile=True, kernel="inductor")._kernels == {torch.device("cpu"): "inductor"}


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(kernel="c"), "pass compile=True too"),
        (dict(compile=True, kernel="triton"), "kernel must be one of auto, c, inductor"),
    ],
)
def test_kernel_settings_that_cannot_work_are_one_clear_line(settings, message):
    with pytest.raises(ValueError, match=message):
        AdamW8bit([torch.nn.Parameter(torch.zeros(10))], **settings)


def test_without_a_c_compiler_the_c_loop_says_so(monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(kernel.shutil, "which", lambda name: None)
    fresh = functools.cache(kernel.kernel_library.__wrapped__)  # as in a process that has not loaded it yet
    monkeypatch.setattr(kernel, "kernel_library", fresh)
    monkeypatch.setattr(adamw8bit, "kernel_library", fresh)
    assert "no C compiler" in kernel.kernel_unavailable()
    with pytest.raises(ValueError, match="no C compiler on the PATH"):
        AdamW8bit([torch.nn.Parameter(torch.zeros(10))], compile=True, kernel="c")


def test_a_compiler_named_by_cc_that_is_not_there_says_so(monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler-here")
    assert kernel.kernel_unavailable() == "the C compiler 'no-such-compiler-here' (from $CC) is not on the PATH"


def test_an_unwritable_cache_says_where_and_what_to_do(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # a file where the kernels' folder would go
    with pytest.raises(ValueError, match="cannot write AdamW8bit's C kernel into .*set MINIGPT_CACHE"):
        kernel.build(kernel.c_compiler(), blocked / "kernels" / "adamw8bit.so")


def test_a_cached_library_that_cannot_load_is_built_again(monkeypatch, tmp_path):
    monkeypatch.setenv("MINIGPT_CACHE", str(tmp_path))
    path = kernel.library_path(kernel.c_compiler())
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a library")  # as a disk that filled up mid-write would leave it (without the rename)
    library = kernel.kernel_library.__wrapped__()  # a fresh load, not the one this process already holds
    assert library.update_tensors is not None and path.read_bytes()[:4] == b"\x7fELF"


def test_a_failed_build_says_why_and_leaves_no_library(monkeypatch, tmp_path):
    """A compiler that fails: the error names it and its last message; no library (whole or half) is left."""
    path = tmp_path / "kernels" / "adamw8bit-test.so"
    monkeypatch.setattr(kernel, "FLAGS", (*kernel.FLAGS, "-no-such-flag-at-all"))
    with pytest.raises(ValueError, match="building AdamW8bit's C kernel with .* failed: .*no-such-flag"):
        kernel.build(kernel.c_compiler(), path)
    assert list(path.parent.iterdir()) == []


def test_the_build_is_cached_per_source_and_rebuilt_when_it_changes(monkeypatch, tmp_path):
    monkeypatch.setenv("MINIGPT_CACHE", str(tmp_path))
    compiler = kernel.c_compiler()
    path = kernel.library_path(compiler)
    assert path.parent == tmp_path / "kernels" and not path.exists()
    kernel.build(compiler, path)
    assert path.exists() and list(path.parent.iterdir()) == [path]  # the temporary file renamed, none left
    edited = tmp_path / "edited.c"
    edited.write_text(kernel.SOURCE.read_text() + "\n/* edited */\n")
    monkeypatch.setattr(kernel, "SOURCE", edited)
    assert kernel.library_path(compiler) != path


def test_a_device_added_later_gets_its_kernel_checked_at_its_first_step():
    """add_param_group with a parameter on another device: its kernel is chosen (and refused, for "c" off the CPU)
    when it is first stepped, never silently left eager."""
    opt = AdamW8bit([torch.nn.Parameter(torch.zeros(BLOCK * 16))], compile=True, kernel="c")
    elsewhere = torch.nn.Parameter(torch.zeros(BLOCK * 16, device="meta"))
    opt.add_param_group({"params": [elsewhere]})
    with pytest.raises(ValueError, match="runs on the CPU, not meta"):
        opt._fused_by(elsewhere, {"exp_avg_codes": None})
