"""Why a step's admission stopped taking requests from the queue: one small code per step.

A policy's admission walks its queue from the head and stops at the first request it
cannot take; the reason is recorded with the step (``stop_reason`` in ``steps.csv``), so a
run shows *what* held the queue back (seats, the step's token budget, KV memory), and the
engine's steady-run check reads the same answer (:meth:`~simbatch.policies.iteration.IterationPolicy.head_blocked`).
SGLang's scheduler returns the like from ``PrefillAdder.add_one_req`` (``AddReqResult``:
continue, no token, other); vLLM's ``Scheduler.schedule`` breaks out of its waiting loop at
the same causes without naming them.

The codes, in the order admission checks them (the first that holds is the reason):

- ``empty``: nobody left in the queue (every queued request was taken, or none waited);
- ``seats``: the running batch is full (``max_num_seqs``; a padded batch's size:
  ``batch_size``, ``max_batch_size`` or the preferred size chosen);
- ``budget``: the step's token budget (``max_num_batched_tokens``) has no room for the head;
- ``kv``: free KV blocks (above the watermark) cannot hold the head's tokens, or a padded
  batch's reservation was cut to fit them;
- ``padding``: the head would push a padded prompt batch past its padding cap (vLLM v0.2's
  ``max_paddings``; :meth:`~simbatch.policies.iteration.IterationPolicy.joins_batch`);
- ``preempted``: the step preempted a running request, and vLLM v1 admits nobody then;
- ``batch``: a padded batch is running, and nothing joins it until its last request ends;
- ``""`` (code 0): the policy gave no reason (one that does not use the shared admission).
"""

from __future__ import annotations

NONE, EMPTY, SEATS, BUDGET, KV, PADDING, PREEMPTED, BATCH = range(8)
STOP_REASONS = ("", "empty", "seats", "budget", "kv", "padding", "preempted", "batch")  # by code
