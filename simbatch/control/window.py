"""What a controller sees of one replica, online, over a sliding window of recent seconds."""

from __future__ import annotations

from collections import deque

import numpy as np


class LatencyWindow:
    """TTFTs by first-token time, and the replica's steps, over the last ``window_s`` seconds.

    Steps are read from the event log as they are appended (each row once):
    the gaps between consecutive decode steps are the inter-token latency every
    running request sees (a prefill-only step in between lengthens the gap, as
    it delays every decode), and their mean over the window is what a request
    decoding now would get as its TPOT. Busy time is the summed step durations.
    """

    def __init__(self, window_s: float, log, replica: int):
        self.window_s = window_s
        self.log = log
        self.replica = replica
        self.ttft: deque[tuple[float, float]] = deque()  # (time, seconds)
        self.itl: deque[tuple[float, float]] = deque()  # (time, gap between decode steps)
        self.steps: deque[tuple[float, float]] = deque()  # (end, duration)
        self.chunked: deque[tuple[float, int, float]] = deque()  # (end, tokens, duration) of steps with a prefill
        self.seen = 0  # log rows already read
        self.last_decode_end: float | None = None

    def first_token(self, now: float, arrival_s: float) -> None:
        """A request's first token came out at ``now``."""
        self.ttft.append((now, now - arrival_s))

    def read_steps(self) -> None:
        """Take in the log rows appended since the last call (this replica's only)."""
        s = self.log.steps
        rep, start, dur, dec = s["replica"], s["start_s"], s["duration_s"], s["decode_tokens"]
        pre = s["prefill_tokens"]
        for i in range(self.seen, len(rep)):
            if rep[i] != self.replica:
                continue
            end = start[i] + dur[i]
            self.steps.append((end, dur[i]))
            if pre[i]:
                self.chunked.append((end, pre[i] + dec[i], dur[i]))
            if dec[i]:
                if self.last_decode_end is not None:
                    self.itl.append((end, end - self.last_decode_end))
                self.last_decode_end = end
        self.seen = len(rep)

    def prune(self, now: float) -> None:
        """Drop what is older than the window."""
        horizon = now - self.window_s
        for d in (self.ttft, self.itl, self.steps, self.chunked):
            while d and d[0][0] <= horizon:
                d.popleft()

    def ttft_percentile(self, q: float) -> float | None:
        """TTFT at percentile ``q`` of the requests whose first token fell in the window."""
        return float(np.percentile([v for _, v in self.ttft], q)) if self.ttft else None

    def mean_itl(self) -> float | None:
        """Mean gap between decode steps in the window (None: fewer than two decode steps)."""
        return sum(v for _, v in self.itl) / len(self.itl) if self.itl else None

    def step_time_line(self) -> tuple[float, float] | None:
        """(a, b) of ``duration = a + b x tokens`` fitted to the window's steps that carried
        a prefill (least squares; None with fewer than 8 such steps or one token count)."""
        if len(self.chunked) < 8:
            return None  # too few to fit a line that a decision should rest on
        x = np.array([t for _, t, _ in self.chunked], dtype=float)
        y = np.array([d for _, _, d in self.chunked])
        if np.ptp(x) == 0:
            return None
        b, a = np.polyfit(x, y, 1)
        return (float(a), float(b)) if b > 0 else None

    def busy_fraction(self, now: float) -> float:
        """Fraction of the window this replica spent in steps."""
        horizon = now - self.window_s
        return sum(min(d, e - horizon) for e, d in self.steps) / self.window_s
