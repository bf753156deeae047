"""Text Generation Inference's batching rule as a simbatch policy: an example of writing one.

Hugging Face's TGI router (``router/src/infer.rs``, ``batching_task``, v1.x) decodes its
running batch and, before each decode step, tries to form a new batch from the queue;
a new batch is prefilled alone (the decodes pause, as in vLLM v0) and then joins the
running one. While requests run, it forms one only if at least
``floor(running x waiting_served_ratio)`` requests are queued, or once
``max_waiting_tokens`` decode steps have passed since the last admission: admissions
come in bursts, so the decodes are interrupted less often and queued requests wait
longer. Defaults are TGI 1.x's launcher defaults (``waiting_served_ratio`` 1.2,
``max_waiting_tokens`` 20, ``max_batch_prefill_tokens`` 4096).

Simplification: TGI also gives up on a new batch when fewer than that minimum fit in
memory; this policy admits what fits once enough requests are queued.

Run it (docs/policies.md, "Writing a policy"):

    simbatch run chat --policy-file docs/examples/tgi_policy.py --set policy.kind=tgi
"""

from dataclasses import dataclass
from math import floor

from simbatch.core.params import require
from simbatch.policies.continuous import ContinuousParams, ContinuousPolicy


@dataclass(frozen=True)
class TGIParams(ContinuousParams):
    """Continuous batching's knobs plus TGI's two; the prefill budget keeps vLLM's name
    ``max_num_batched_tokens`` (TGI's ``max_batch_prefill_tokens``)."""

    max_num_batched_tokens: int = 4096
    waiting_served_ratio: float = 1.2
    max_waiting_tokens: int = 20

    def __post_init__(self):
        super().__post_init__()
        require(self.waiting_served_ratio >= 0, "waiting_served_ratio", "must be >= 0")
        require(self.max_waiting_tokens >= 1, "max_waiting_tokens", "must be >= 1")


class TGIPolicy(ContinuousPolicy):
    """Prefill-first continuous batching that admits only when enough requests queue up."""

    kind = "tgi"
    Params = TGIParams
    # No `fast_path = True`: the next plan depends on a step counter (waited), which the
    # engine's steady runs do not advance, so this policy runs step by step.

    def __init__(self, params, kv, note=lambda m: None):
        super().__init__(params, kv, note)
        self.waited = 0  # decode steps since the last admission (TGI's waiting_tokens)

    def schedule(self, now):
        p = self.params
        min_size = floor(len(self.running) * p.waiting_served_ratio)
        prefills = []
        if not self.running or self.waited >= p.max_waiting_tokens or len(self.waiting) >= min_size:
            prefills = self.admit_prefills(p.max_num_batched_tokens, now)
        self.waited = 0 if prefills else self.waited + 1
        return self.plan([] if prefills else self.grow_decodes(), prefills)
