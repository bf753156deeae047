"""``cluster.autoscale``: a fleet that grows and shrinks with its load (issue 36 §2).

The controller runs every ``interval_s`` and asks for ``ceil(total / target)`` replicas, the
total summed over the replicas that take requests, of the per-replica ``metric``:

- ``inflight``: requests running or queued on it (a Kubernetes HPA on a per-pod gauge such as
  ``vllm:num_requests_running + waiting``); ``waiting``: requests queued (KEDA scaling on
  queue length); ``kv_usage``: the share of its KV cache in use, ``target`` in (0, 1];
- ``schedule``: ``[[t_s, replicas], ...]``, the count from each time on (a scheduled scaler).

As the HPA does (kubernetes.io, "Horizontal Pod Autoscaling", algorithm details), a ratio of
desired to current within ``tolerance`` (0.1) changes nothing, and replicas still starting
count as current and as idle, so a scale-up in flight is not asked for twice. The two
cooldowns are the HPA's stabilisation windows (``behavior.scaleUp`` / ``scaleDown``
``stabilizationWindowSeconds``, defaults 0 s and 300 s): it scales up to the lowest count
recommended over the last ``scale_up_cooldown_s`` and down to the highest recommended over
the last ``scale_down_cooldown_s``, so a dip shorter than the window shrinks nothing.
Between ``min`` and ``max``; ``cluster.replicas`` is how many are ready at t = 0.

A new replica takes requests once provisioned: ``node_start_s + image_pull_s + the model's
bytes / storage_gb_per_s + engine_start_s``. The defaults are a node already in the pool
with the image cached (both 0: set them for cold nodes, where they take minutes), safetensors
read at 0.5 GB/s (vllm-project/vllm#38820: 12.66 GiB loaded in 24.84 s) and 34 s of engine
start-up (vllm-project/vllm#20264: "init engine (profile, create kv cache, warmup model) took
34.11 seconds", CUDA-graph capture 17 s of it, with a warm torch.compile cache).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from simbatch.core.params import MAX_REPLICAS, require

METRICS = ("inflight", "waiting", "kv_usage", "schedule")


@dataclass(frozen=True)
class AutoscaleParams:
    """The controller and the provisioning delay (module docstring); ``initial`` is
    ``cluster.replicas``, filled in by the cluster section."""

    metric: str = "inflight"
    target: float = 0.0
    min: int = 1
    max: int = 1
    interval_s: float = 15.0  # the HPA controller's default sync period
    scale_up_cooldown_s: float = 0.0
    scale_down_cooldown_s: float = 300.0
    tolerance: float = 0.1
    schedule: list[list[float]] = field(default_factory=list)
    node_start_s: float = 0.0
    image_pull_s: float = 0.0
    storage_gb_per_s: float = 0.5
    engine_start_s: float = 34.0
    initial: int = 0

    def __post_init__(self):
        require(self.metric in METRICS, "metric", f"unknown metric {self.metric!r}; allowed: {', '.join(METRICS)}")
        require(self.min >= 1, "min", "must be >= 1 (no scale to zero: a request needs a replica to queue on)")
        require(self.max >= self.min, "max", f"must be >= min ({self.min}), got {self.max}")
        require(self.max <= MAX_REPLICAS, "max", f"must be at most {MAX_REPLICAS:,} (every replica is built "
                                                 f"before the first step), got {self.max:,}")
        require(self.interval_s > 0, "interval_s", "must be > 0")
        for name in ("scale_up_cooldown_s", "scale_down_cooldown_s", "node_start_s", "image_pull_s",
                     "engine_start_s"):
            require(getattr(self, name) >= 0, name, "must be >= 0")
        require(self.storage_gb_per_s > 0, "storage_gb_per_s", "must be > 0")
        require(0 <= self.tolerance < 1, "tolerance", "must be in [0, 1)")
        if self.metric == "schedule":
            require(bool(self.schedule), "schedule", "required with metric: schedule: [[t_s, replicas], ...]")
            self._check_schedule()
        else:
            require(not self.schedule, "schedule", "only with metric: schedule")
            require(self.target > 0, "target", f"required, > 0, for metric {self.metric}")
            if self.metric == "kv_usage":
                require(self.target <= 1, "target", "kv_usage is a share of the KV cache: at most 1")

    def _check_schedule(self) -> None:
        last = -math.inf
        for i, entry in enumerate(self.schedule):
            require(len(entry) == 2, "schedule", f"entry {i}: expected [t_s, replicas], got {entry!r}")
            t, n = entry
            require(t >= 0 and t > last, "schedule", f"entry {i}: t_s {t:g} must be >= 0 and after the one before")
            require(n == int(n) and self.min <= n <= self.max, "schedule",
                    f"entry {i}: {n:g} replicas is not a whole number within min {self.min} and max {self.max}")
            last = t

    def provisioning_s(self, model_bytes: float) -> float:
        """Seconds from a scale-up to the new replica taking requests."""
        return self.node_start_s + self.image_pull_s + model_bytes / (self.storage_gb_per_s * 1e9) + self.engine_start_s

    def scheduled(self, now: float) -> int:
        """The schedule's count at ``now`` (``initial`` before its first entry)."""
        count = self.initial
        for t, n in self.schedule:
            if t > now:
                break
            count = int(n)
        return count
