"""Real backends: execute a step plan on a real model instead of pricing it.

A backend is anything with ``step_cost(plan) -> StepCost`` and ``describe()``
(the cost models in :mod:`simbatch.costmodel` are backends too). The one here,
:class:`~simbatch.backends.torch_backend.TorchBackend`, runs every step as one
forward pass of a Llama-architecture model with random weights and a paged KV
cache, and returns the measured wall time.

torch is imported only when a torch backend is built, so ``import simbatch``
and the simulator keep working without it. The modules split the work:
``torch_model`` (the maths), ``torch_kv`` (the paged KV pool),
``torch_inputs`` (plan -> index tensors) and ``torch_backend`` (timing and
bookkeeping).
"""

from __future__ import annotations

__all__ = ["TorchBackend"]


def __getattr__(name):
    if name == "TorchBackend":
        from simbatch.backends.torchdep import require_torch

        require_torch("the torch backend")
        from simbatch.backends.torch_backend import TorchBackend

        return TorchBackend
    raise AttributeError(f"module 'simbatch.backends' has no attribute {name!r}")
