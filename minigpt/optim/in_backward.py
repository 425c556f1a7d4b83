"""The optimizer step fused into backward: each parameter is updated, and its gradient freed, once it is complete.

An ordinary step keeps every gradient until backward ends, then updates: the whole model's gradients are
alive at once. Here a hook on each parameter (torch's register_post_accumulate_grad_hook, which runs once
autograd has added every contribution into .grad) steps the optimizer for that parameter alone and frees
its gradient, so at most about one parameter's gradient is alive (torchtune's optimizer_in_bwd does the same).

The tied embedding is ONE Parameter used twice (by the embedding and by lm_head): autograd sums both
contributions into its .grad before its hook runs, so it is stepped once, with the whole gradient.

One optimizer holds every parameter, as in an ordinary step: torch's optimizers (and AdamW8bit) skip
parameters whose .grad is None, and inside a hook the parameter being stepped is the only one with a
gradient (the earlier ones were freed by their own hooks, the later ones are not made yet). So its state
and its state_dict are the ordinary optimizer's: a checkpoint resumes with or without the step in backward.
What cannot work is refused by config.check_optimizer: accumulation, global-norm clipping, fp16's scaler.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minigpt.optim.master_weights import MasterWeights


class StepInBackward:
    """Hooks that step `optimizer` for each parameter of `params` as soon as its gradient is complete.

    `master` (bf16-pure with master weights): the optimizer holds the fp32 copies; each hook moves its bf16
    gradient to its copy, steps it, and rounds the result back into the model's parameter.
    The squared norms of the gradients stepped are summed, so the step can log the usual global grad norm.
    """

    def __init__(
        self, params: list[torch.Tensor], optimizer: torch.optim.Optimizer, master: MasterWeights | None = None
    ) -> None:
        self.optimizer = optimizer
        self.norm_squared: torch.Tensor | None = None  # sum over parameters of |grad|^2, this step so far
        self.steps_taken = 0  # parameter updates this step (a check that every parameter got its one)
        self.watch: Callable[[torch.Tensor], None] | None = None  # a meter's look at each gradient before it goes
        copies = dict((id(p), m) for p, m in master.pairs) if master else {}
        self.handles = [p.register_post_accumulate_grad_hook(self._hook(copies.get(id(p)))) for p in params]

    def _hook(self, copy: torch.Tensor | None):
        def step_this_parameter(p: torch.Tensor) -> None:
            if self.watch is not None:
                self.watch(p.grad)
            trained = p if copy is None else copy
            if copy is not None:  # MasterWeights.grads_to_master, for this parameter
                copy.grad, p.grad = p.grad.float(), None
            norm = torch.linalg.vector_norm(trained.grad, dtype=torch.float32)  # a reduction: no (numel) temporary
            self.norm_squared = norm.square() if self.norm_squared is None else self.norm_squared + norm.square()
            self.optimizer.step()  # only `trained` has a gradient now, so only it is updated
            trained.grad = None  # freed: the point of the step in backward
            if copy is not None:
                with torch.no_grad():
                    p.copy_(copy)  # MasterWeights.master_to_model, for this parameter
            self.steps_taken += 1

        return step_this_parameter

    def finish(self) -> tuple[torch.Tensor, int]:
        """The step's global grad norm (a 0-dim tensor) and how many parameters were stepped; reset for the next."""
        norm = self.norm_squared.sqrt() if self.norm_squared is not None else torch.zeros(())
        taken, self.norm_squared, self.steps_taken = self.steps_taken, None, 0
        return norm, taken

    def remove(self) -> None:
        """Take the hooks off the parameters (the model then trains with an ordinary step again)."""
        for h in self.handles:
            h.remove()
