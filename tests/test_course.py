"""chapter_settings on simulated devices: every chapter's device and precision choice runs where it is made."""

import re
from pathlib import Path

import pytest
import torch

from minigpt import course
from minigpt.course import SCALES, chapter_settings, simulated_facts, supports
from minigpt.device import DeviceInfo
from minigpt.precision import precision_problem

CHAPTERS = sorted((Path(__file__).parent.parent / "chapters").glob("[0-9][0-9]_*.md"))


def _gpu(name: str, cc: tuple[int, int], gib: int) -> DeviceInfo:
    bf16 = cc >= (8, 0)
    return DeviceInfo("cuda", "cuda:0", name, gib * 2**30, bf16, bf16, True, compute_capability=cc)


DEVICES = {
    "T4 (sm_75)": _gpu("Tesla T4", (7, 5), 15),
    "A100 (sm_80)": _gpu("NVIDIA A100-SXM4-40GB", (8, 0), 40),
    "H100 (sm_90)": _gpu("NVIDIA H100 80GB HBM3", (9, 0), 80),
    "Apple MPS": DeviceInfo("mps", "mps", "Apple GPU (MPS)", 16 * 2**30, True, True, True),
    "CPU with bf16": DeviceInfo("cpu", "cpu", "Xeon (AMX)", 8 * 2**30, True, True, True, note="amx_bf16"),
    "CPU without bf16": DeviceInfo("cpu", "cpu", "EPYC", 8 * 2**30, True, False, True),
}
EXPECTED = {
    "T4 (sm_75)": "fp16",
    "A100 (sm_80)": "bf16",
    "H100 (sm_90)": "bf16",
    "Apple MPS": "bf16",
    "CPU with bf16": "bf16",
    "CPU without bf16": "bf16",
}


def _settings_cell(chapter: Path) -> str:
    """The chapter's code from `SCALE = ` to the end of the cell that calls chapter_settings.

    (Some chapters set SCALE alone in a parameters cell and the settings in a later one.)
    """
    text = chapter.read_text()
    start = text.index("\nSCALE = ")
    return text[start : text.index("\n```", text.index("\nSETTINGS = chapter_settings(SCALE)", start))]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_takes_its_device_and_precision_from_chapter_settings(chapter):
    cell = _settings_cell(chapter)
    # DEVICE = SETTINGS.device in chapters 1-7; chapter 8 picks GPUs or CPU processes from SETTINGS.device.type
    assert "SETTINGS.device" in cell
    assert not re.search(r"DEVICE = .*(pick_device|torch\.device)", cell), "the device must come from SETTINGS"
    assert not re.search(r'precision="bf16" if', chapter.read_text()), "precision must come from SETTINGS"


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("name", DEVICES)
def test_each_chosen_setting_is_supported_on_each_simulated_device(name, scale, monkeypatch):
    info = DEVICES[name]
    monkeypatch.setattr(course, "pick_device", lambda: torch.device(info.device))
    monkeypatch.setattr(course, "device_info", lambda device: info)
    settings = chapter_settings(scale)  # what every chapter's settings cell calls
    assert settings.device.type == info.type  # an attached GPU is used at both scales
    assert settings.precision == EXPECTED[name]
    assert precision_problem(simulated_facts(info, settings.precision)) is None
    assert settings.supports("fp32") and settings.supports("fp16")  # chapter 4's fp16 runs everywhere here
    bf16_info = info if settings.bf16_device.type == info.type else DEVICES["CPU without bf16"]
    assert precision_problem(simulated_facts(bf16_info, "bf16-pure")) is None
    assert name in settings.describe() or info.name in settings.describe() or info.type == "cpu"


def test_t4_refuses_bf16_and_moves_the_bf16_lessons_to_the_cpu():
    t4 = chapter_settings("full", DEVICES["T4 (sm_75)"])
    assert not supports(DEVICES["T4 (sm_75)"], "bf16")
    assert "no bf16" in precision_problem(simulated_facts(DEVICES["T4 (sm_75)"], "bf16"))
    assert (t4.precision, t4.bf16_device) == ("fp16", torch.device("cpu"))
    assert chapter_settings("full", DEVICES["A100 (sm_80)"]).bf16_device == torch.device("cuda:0")


def test_unknown_scale_is_refused():
    with pytest.raises(ValueError, match="SCALE"):
        chapter_settings("medium", DEVICES["A100 (sm_80)"])


def test_this_machine_gets_a_supported_precision():
    settings = chapter_settings("small")
    assert settings.supports(settings.precision)
