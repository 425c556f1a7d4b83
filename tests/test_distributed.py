import torch

from minigpt.distributed import spawn_on_cpu
from minigpt.train import TrainConfig, train_and_report


def test_ddp_two_processes_accum_2_equals_one_process_accum_4():
    """Each rank takes half of the same window, so 2 x accum 2 sees the sequences of 1 x accum 4."""
    common = dict(preset="tiny", batch=2, ctx=32, steps=2, sample_tokens=0, verbose=False)
    ranks = spawn_on_cpu(train_and_report, (TrainConfig(accum=2, **common),), world=2)
    single = train_and_report(TrainConfig(accum=4, **common))
    for name, p in single["state_dict"].items():
        for r in ranks:
            # gloo averages in a different order than one process sums: fp32 rounding noise only.
            torch.testing.assert_close(r["state_dict"][name], p, rtol=1e-5, atol=1e-6, msg=name)
    assert [h["loss"] for h in ranks[0]["history"]] == [h["loss"] for h in ranks[1]["history"]]
    for a, b in zip(ranks[0]["history"], single["history"]):
        assert abs(a["loss"] - b["loss"]) < 1e-5
