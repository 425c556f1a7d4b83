"""Grades chapter 2: parameter count, static bytes by regime, activation bytes for a config.

All three are arithmetic on the config: the answers are the same on every machine.
"""

from dataclasses import replace

import pytest
import torch

from minigpt import memory
from minigpt.model import GPT, PRESETS, ModelConfig, count_params
from minigpt.precision import static_bytes_per_param

CHAPTER = "ch02_memory_anatomy"
HINTS = {  # the hints of solutions/ch02_memory_anatomy.py, shown under a wrong answer
    "2.1": "blocks (4C^2 + 3CH + 2C each) + embedding V*C (lm_head is tied to it) + final norm C",
    "2.2": "bytes per parameter = weights + master copy + grads + Adam m and v; autocast keeps fp32",
    "2.3": "sum the saved tensors per token (per block: 52C + 16H + 8 + 4*heads) times batch*ctx",
}
SMALL = [
    ModelConfig(n_layer=2, n_head=2, n_embd=32, ctx=16, vocab_size=64),
    ModelConfig(n_layer=3, n_head=4, n_embd=96, ctx=32, vocab_size=1000),
]


@pytest.mark.exercise("2.1", points=2)
def test_count_parameters_matches_the_model(answers):
    for cfg in SMALL:  # small enough to build
        want = GPT(cfg).num_params()
        got = answers.count_parameters(cfg)
        hint = (
            " (lm_head is tied to the embedding: count that matrix once)"
            if got == want + cfg.vocab_size * cfg.n_embd
            else ""
        )
        assert got == want, f"count_parameters({cfg}) returned {got:,}, the model has {want:,}{hint}"
    for name, cfg in PRESETS.items():  # checked against the package's formula (tested against GPT())
        assert answers.count_parameters(cfg) == count_params(cfg), f"wrong count for the {name} preset"


@pytest.mark.exercise("2.1", points=1)
def test_2_1_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["2.1"]())


@pytest.mark.exercise("2.2", points=2)
def test_static_bytes_by_regime(answers):
    regimes = {
        "fp32": ("fp32", False),
        "bf16": ("bf16", False),
        "fp16": ("fp16", False),
        "bf16-pure": ("bf16-pure", False),
        "bf16-pure+master": ("bf16-pure", True),
    }
    for regime, (precision, master) in regimes.items():
        per_param = static_bytes_per_param(precision, master_weights=master)["total"]
        for n in (1, 10_000_000):
            got = answers.static_bytes(n, regime)
            assert got == per_param * n, (
                f"static_bytes({n:,}, {regime!r}) returned {got:,}, expected {per_param} bytes per parameter "
                f"= {per_param * n:,}"
                + (
                    " (autocast keeps the fp32 weights: it saves activations, not these)"
                    if regime in ("bf16", "fp16")
                    else ""
                )
            )


@pytest.mark.exercise("2.2", points=1)
def test_static_bytes_rejects_an_unknown_regime(answers):
    with pytest.raises(ValueError):
        answers.static_bytes(1000, "fp8")
        pytest.fail('static_bytes(1000, "fp8") returned instead of raising ValueError: fp8 is no regime here')


@pytest.mark.exercise("2.2", points=1)
def test_2_2_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["2.2"]())


@pytest.mark.exercise("2.3", points=3)
def test_activation_bytes_match_the_activation_table(answers):
    cases = [
        (SMALL[0], 2, 16),
        (SMALL[1], 4, 32),
        (PRESETS["tiny"], 8, 64),
        (PRESETS["10m"], 8, 256),
        (PRESETS["30m"], 4, 512),
    ]
    for cfg, batch, ctx in cases:
        want = memory.estimate(cfg, batch, ctx, "fp32", "none", device="cpu").activations
        got = answers.activation_bytes(cfg, batch, ctx)
        # The small terms may be left out: per token, each block's two 1/rms and its logsumexp (one per
        # head), 4 * (2 + heads) bytes, and outside the blocks the int64 ids and targets and the final
        # 1/rms (20 bytes), plus the 4-byte normalizer. One missing C-wide tensor costs 4C bytes per token
        # and block, more than all of them together (C > 2 + heads + 20 in every case here), so it fails.
        # (A relative tolerance cannot do this: 5% let a missing C-wide tensor per block pass.)
        small = batch * ctx * (cfg.n_layer * 4 * (2 + cfg.n_head) + 20) + 4
        per_c_tensor = batch * ctx * 4 * cfg.n_embd * cfg.n_layer
        assert abs(got - want) <= small, (
            f"activation_bytes(n_layer={cfg.n_layer}, n_embd={cfg.n_embd}, vocab={cfg.vocab_size}, "
            f"batch={batch}, ctx={ctx}) returned {got:,} bytes, the activation table says {want:,} bytes "
            f"({got - want:+,} bytes, {(got - want) / per_c_tensor:+.2f} C-wide fp32 tensors per block): did you "
            f"count the fp32 log-softmax (V per token), the four H-wide tensors of the SwiGLU MLP and every "
            f"C-wide tensor of the table?"
        )


@pytest.mark.exercise("2.3", points=1)
def test_activation_bytes_against_a_measured_step(answers, saved_bytes):
    cfg, batch, ctx = SMALL[1], 2, 32
    model = GPT(cfg).train()
    tokens = torch.randint(0, cfg.vocab_size, (batch, ctx + 1), generator=torch.Generator().manual_seed(0))
    measured, _ = saved_bytes(model, lambda: model(tokens[:, :-1], tokens[:, 1:]))
    got = answers.activation_bytes(cfg, batch, ctx)
    # 10%: the table agrees with a measurement to within 5% (chapter 2), plus 5% for the small terms an
    # answer may leave out (they are under 5% of the total here).
    assert got == pytest.approx(measured, rel=0.10), (
        f"a real forward pass kept {measured:,} bytes for backward; activation_bytes says {got:,} bytes "
        f"({got / measured:.2f}x)"
    )


@pytest.mark.exercise("2.3", points=1)
def test_2_3_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["2.3"]())


# ----------------------------------------------------------------------------------------------------------
# Contracts: the answer against the reference on inputs the learner did not choose (minigpt.grading.contract).
#
# All three answers are integer arithmetic on the config: every comparison is exact, and an int is an int (a
# float 4.0 where an int is promised fails). The configs vary every field of ModelConfig, so an answer that
# reads the wrong one (n_head for n_layer, cfg.ctx for ctx) or a shortcut for mlp_hidden (4C, 8C/3 unrounded,
# rounded down) shows. The many small calls of an exercise go to its worker in one batch (Calls, _each): one
# visit, where a case per call would cost a round trip each. Each promise of a docstring gets a plain case.

from minigpt.grading.contract import Case  # noqa: E402

NOTHING_IN_PLACE = "In place: nothing."
CONFIGS = [  # n_embd/n_head even; 8C/3 a multiple of 64 (24, 96, 72) or not (2, 40, 42, 56, 128)
    ModelConfig(n_layer=1, n_head=1, n_embd=2, ctx=1, vocab_size=1),
    ModelConfig(n_layer=3, n_head=3, n_embd=42, ctx=20, vocab_size=97),
    ModelConfig(n_layer=5, n_head=2, n_embd=24, ctx=9, vocab_size=50257, norm_eps=1e-6),
    ModelConfig(n_layer=2, n_head=6, n_embd=96, ctx=64, vocab_size=500, rope_base=500.0),
    ModelConfig(n_layer=4, n_head=5, n_embd=40, ctx=16, vocab_size=300),
    ModelConfig(n_layer=7, n_head=2, n_embd=56, ctx=33, vocab_size=1000),
    ModelConfig(n_layer=1, n_head=8, n_embd=128, ctx=128, vocab_size=8192),
    ModelConfig(n_layer=6, n_head=4, n_embd=72, ctx=40, vocab_size=64, dropout=0.1),
    PRESETS["125m"],
]


class Calls(tuple):
    """(text, args, kwargs) of calls of one function, made in one visit to the worker by _each; shown by count."""

    def __repr__(self) -> str:
        return f"<{len(self)} calls>"


def _calls(function: str, inputs: list) -> Calls:
    """Calls of function, one for each tuple of positional arguments in inputs."""
    return Calls((f"{function}({', '.join(map(repr, args))})", tuple(args), {}) for args in inputs)


def _each(function, calls: Calls) -> dict:
    """{call: what it returned, or {"raised ValueError": True} for the kind of error it raised}."""
    results = {}
    for text, args, kwargs in calls:
        try:
            results[text] = function(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - a documented error is an outcome like a value
            if any(isinstance(e, NotImplementedError) for e in _chain(error)):
                raise  # not done yet, not a wrong answer
            kind = next(c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins")
            results[text] = {f"raised {kind}": True}  # the kind of error, as the grader compares it
    return results


def _chain(error: BaseException | None):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _cases_2_1() -> list[Case]:
    return [
        Case("count_parameters", (_calls("count_parameters", [(cfg,) for cfg in CONFIGS]),), drive=_each),
        Case(
            "count_parameters",
            (ModelConfig(n_layer=2, n_head=3, n_embd=30, ctx=5, vocab_size=11),),
            promise=(
                "Returns: int, the number of parameters, as GPT(cfg).num_params() counts them.",
                NOTHING_IN_PLACE,
                "Raises: nothing of its own.",
            ),
        ),
    ]


def _cases_2_2() -> list[Case]:
    regimes = ["fp32", "bf16", "fp16", "bf16-pure", "bf16-pure+master"]
    regimes += ["FP32", "Bf16", "fP16", "BF16-PURE", "bf16-Pure+Master"]  # any case
    unknown = ["fp8", "", "fp64", "bf16+master", "bf16-master", "pure", "bf16-pure+master+", "int8"]
    inputs = [(n, regime) for regime in regimes for n in (0, 1, 7, 123_456_789, 10**13 + 1)]
    inputs += [(1000, regime) for regime in unknown] + [(-1, "fp32"), (-123, "BF16-pure")]
    return [
        Case("static_bytes", (_calls("static_bytes", inputs),), drive=_each),
        Case(
            "static_bytes",
            (3_000_001, "bf16-pure+master"),
            promise=(
                "Returns: int, the bytes: bytes per parameter of the regime times n_params (0 for no parameters).",
                NOTHING_IN_PLACE,
            ),
        ),
        Case(
            "static_bytes",
            (10,),
            {"regime": "BF16-Pure"},
            promise="Returns: int, the bytes: bytes per parameter of the regime times n_params (0 for no parameters).",
        ),
        Case(
            "static_bytes",
            (1000, "fp8"),
            promise="Raises: ValueError if regime is not one of REGIMES (whatever its case).",
        ),
        Case(
            "static_bytes",
            (1000, "Bf16-Master"),
            promise="Raises: ValueError if regime is not one of REGIMES (whatever its case).",
        ),
        Case("static_bytes", (-5, "fp16"), promise="Raises: ValueError if n_params is negative."),
    ]


def _cases_2_3() -> list[Case]:
    inputs = []
    for cfg in CONFIGS:
        if cfg.dropout == 0:  # a batch of one, a shorter ctx than the model's (odd sizes), and the model's own
            inputs += [(cfg, 1, cfg.ctx), (cfg, 3, max(1, cfg.ctx // 2 - 1)), (cfg, 7, 1)]
    too_long = CONFIGS[1]
    inputs += [(too_long, 0, 4), (too_long, -2, 4), (too_long, 2, 0), (too_long, 2, too_long.ctx + 1)]
    inputs += [(CONFIGS[7], 2, 8), (replace(CONFIGS[1], dropout=0.5), 1, 1)]  # dropout on
    sizes = "Raises: ValueError if batch or ctx is less than 1, or if ctx is larger than cfg.ctx."
    dropout = "Raises: ValueError if cfg.dropout is not 0 (dropout saves masks this table does not count)."
    return [
        Case("activation_bytes", (_calls("activation_bytes", inputs),), drive=_each),
        Case(
            "activation_bytes",
            (CONFIGS[4], 5, 11),
            promise=(
                "Returns: int, the bytes of every saved tensor of the step, for batch sequences of ctx tokens.",
                NOTHING_IN_PLACE,
            ),
        ),
        Case("activation_bytes", (CONFIGS[2],), {"batch": 2, "ctx": 10}, promise=sizes),
        Case("activation_bytes", (CONFIGS[2], 0, 3), promise=sizes),
        Case("activation_bytes", (CONFIGS[7], 1, 5), promise=dropout),
    ]


CONTRACTS = {"2.1": _cases_2_1, "2.2": _cases_2_2, "2.3": _cases_2_3}
