"""Test kit: workloads whose prompts share prefixes (trace-style hash_ids or chat sessions)."""

from __future__ import annotations

import numpy as np


def shared_prefix_requests(seed: int, num_requests: int = 150, rate: float = 10.0, hash_block: int = 64,
                           mode: str = "hash", priorities: int = 1) -> list[dict]:
    """Inline ``requests:`` entries. ``hash``: every prompt starts with one of four shared
    "documents" (1-6 hash blocks) after a common system block, then unique blocks;
    ``session``: each request belongs to one of 12 sessions. ``priorities``: classes 0..k-1."""
    rng = np.random.default_rng(seed)
    docs = [[1000 + 10 * d + j for j in range(int(rng.integers(1, 7)))] for d in range(4)]
    t, fresh, out = 0.0, 10_000, []
    for _ in range(num_requests):
        t += float(rng.exponential(1.0 / rate))
        prompt = int(np.clip(rng.lognormal(np.log(300), 0.7), 20, 1500))
        item = {"arrival_s": round(t, 6), "prompt": prompt,
                "output": int(np.clip(rng.lognormal(np.log(50), 0.8), 1, 300)),
                "priority": int(rng.integers(0, priorities))}
        if mode == "hash":
            blocks = -(-prompt // hash_block)
            ids = ([0] + docs[int(rng.integers(0, 4))])[:blocks]
            ids += list(range(fresh, fresh + blocks - len(ids)))
            fresh += blocks
            item["hash_ids"] = ids
        else:
            item["session_id"] = f"s{int(rng.integers(0, 12))}"
        out.append(item)
    return out
