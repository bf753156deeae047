"""Capacity searches run concurrently (issue 15 item 2): each search goes on as soon as its own
probe is back, and nothing that comes out depends on the order runs finish in."""

import io
import random
from concurrent.futures import Future

import pandas as pd
import pytest

from simbatch.capacity import drive, expand, fewest_search, find_capacity, parse_slos, rate_search
from simbatch.capacity.search import HOPELESS, drive_concurrently
from simbatch.errors import SimbatchError
from simbatch.runs.executors import InlineExecutor
from simbatch.scenario.spec import from_dict
from simbatch.sweep.progress import Progress

# --- a fake executor that finishes jobs in an order of the test's choosing -------------------


class HeldExecutor:
    """Runs nothing when a job is submitted: each ``wait_any`` finishes one queued job, the one
    ``pick(queue)`` chooses, and returns it. ``events`` records ("submit" | "done", item) in
    the order they happened, so a test can see what was submitted before what returned."""

    name = "held"

    def __init__(self, pick):
        self.pick = pick
        self.queue: list[tuple[Future, object, object]] = []
        self.events: list[tuple[str, object]] = []

    def submit(self, fn, item):
        future = Future()
        self.queue.append((future, fn, item))
        self.events.append(("submit", item))
        return future

    def wait_any(self, futures):
        done = {f for f in futures if f.done()}
        if done:
            return done
        self.queue = [job for job in self.queue if not job[0].cancelled()]
        future, fn, item = self.queue.pop(self.pick(self.queue))
        try:
            future.set_result(fn(item))
        except Exception as exc:  # noqa: BLE001 - as a pool hands a job's error back
            future.set_exception(exc)
        self.events.append(("done", item))
        assert future in futures
        return {future}

    def close(self):
        pass


def fifo(queue):
    return 0


def lifo(queue):
    return len(queue) - 1


def shuffled(seed):
    rng = random.Random(seed)
    return lambda queue: rng.randrange(len(queue))


def last_of(policy):
    """Finish every other candidate's runs before any of ``policy``'s (the slow one)."""
    def pick(queue):
        others = [i for i, (_, _, probe) in enumerate(queue) if probe.candidate.policy != policy]
        return others[0] if others else 0
    return pick


# --- the driver, on a fake oracle --------------------------------------------------------------


def lockstep(bounds):
    return drive({b: rate_search(1.0, 0.05) for b in bounds}, lambda asked: [k <= b for b, k in asked])


@pytest.mark.parametrize("order", ["fifo", "lifo", "shuffled0", "shuffled1"])
def test_concurrent_driver_ends_each_search_where_lockstep_does_in_any_answer_order(order):
    bounds = [0.003, 0.37, 1.0, 5.5, 100.0]
    asked, queue = [], []
    rng = random.Random(order)

    def answers():
        i = {"fifo": 0, "lifo": len(queue) - 1}.get(order, None)
        key, k = queue.pop(rng.randrange(len(queue)) if i is None else i)
        return [(key, k <= key)]

    out = drive_concurrently({b: rate_search(1.0, 0.05) for b in bounds},
                             lambda key, k: (asked.append((key, k)), queue.append((key, k))), answers)
    assert out == lockstep(bounds) and list(out) == bounds  # results in the searches' order
    # each search asked the same points, in the same order, as in lockstep
    for b in bounds:
        steps = []
        drive({b: rate_search(1.0, 0.05)}, lambda a: [steps.append(k) or k <= b for _, k in a])
        assert [k for key, k in asked if key == b] == steps


def test_concurrent_driver_starts_the_searches_a_finished_one_asks_for():
    queue = []

    def then(key, result):
        if key == "rate":  # like a group's sizing once its rate search is done
            return {"size": fewest_search(int(result.lo))}
        return None

    out = drive_concurrently({"rate": rate_search(1.0, 0.05)}, lambda key, p: queue.append((key, p)),
                             lambda: [(key, p <= 9 if key == "rate" else p >= 5) for key, p in [queue.pop()]],
                             then)
    assert list(out) == ["rate", "size"] and out["rate"].lo <= 9 < out["rate"].hi and out["size"] == 5


def test_concurrent_driver_passes_hopeless_through():
    queue = []
    out = drive_concurrently({"x": rate_search()}, lambda key, k: queue.append(k),
                             lambda: [("x", HOPELESS if queue.pop() < 1 else False)])
    assert out["x"].hopeless and out["x"].hi == 0.5


# --- find_capacity: concurrency and determinism ------------------------------------------------

SCENARIO = {
    "name": "tiny",
    "workload": {"synthetic": {"num_requests": 24, "arrival": {"kind": "poisson", "rate": 2},
                               "prompt": {"kind": "lognormal", "median": 400, "sigma": 0.6, "max": 2000},
                               "output": {"kind": "constant", "value": 32}}},
    "model": "llama-2-7b", "hardware": "a100-80gb", "policy": {"kind": "continuous"},
}


def plan(executor, log=lambda line: None, bar=None):
    """Static (which fails at every rate, and stops early) and continuous batching at one and two
    replicas, two seeds, sized for 6 req/s."""
    sc = from_dict(SCENARIO)
    return find_capacity(sc, parse_slos(["ttft_p99_ms=100"]), expand(sc, ["static", "continuous"], None, None,
                                                                         None, [1, 2]),
                         seeds=[0, 1], tolerance=0.2, target_rate=6, executor=executor, log=log, bar=bar)


@pytest.fixture(scope="module")
def in_order():
    return plan(InlineExecutor())


def test_the_example_covers_an_early_stop_and_a_sizing(in_order):
    static, continuous = in_order.boundaries[0], in_order.boundaries[2]
    assert static.hopeless and static.lo is None  # stopped early: lower rates do not help
    assert continuous.lo and continuous.hi
    sized = [s for s in in_order.sizing.values() if s.replicas]
    assert [s.group.policy for s in sized] == ["continuous"] and sized[0].below is not None


@pytest.mark.parametrize("pick", [lifo, shuffled(1), shuffled(2), last_of("static"), last_of("continuous")],
                         ids=["lifo", "shuffled1", "shuffled2", "static-last", "continuous-last"])
def test_results_do_not_depend_on_the_order_runs_finish_in(in_order, pick):
    held = HeldExecutor(pick)
    res = plan(held)
    assert [e for e, _ in held.events].count("done") == len(in_order.probes)  # each run once
    pd.testing.assert_frame_equal(pd.DataFrame(res.probes), pd.DataFrame(in_order.probes))
    assert res.boundaries == in_order.boundaries
    assert res.sizing == in_order.sizing


def test_a_fast_search_asks_its_next_probe_before_a_slow_one_returns():
    """No rounds: with static batching's runs held back, continuous batching's next probes are
    submitted (and its sizing started) before static's first probe is back."""
    held = HeldExecutor(last_of("static"))
    plan(held)
    events = [(kind, p.candidate.policy, p.candidate.replicas, p.scale) for kind, p in held.events]
    static_back = next(i for i, e in enumerate(events) if e[:2] == ("done", "static"))
    later = [e for e in events[:static_back] if e[0] == "submit" and e[1] == "continuous" and e[3] != 1]
    assert len({e[3] for e in later}) >= 3  # several steps of its search, not one round
    assert any(e[2] > 2 for e in later)  # sizing probes, more replicas than any rate search ran


def test_one_bar_counts_runs_asked_so_far_and_each_search_logs_as_it_ends(in_order):
    stream, lines = io.StringIO(), []
    res = plan(InlineExecutor(), log=lines.append, bar=lambda n: Progress(n, stream=stream, live=True))
    draws = [d for d in stream.getvalue().replace("\n", "\r").split("\r") if d]
    totals = [int(d.split("] ")[1].split("/")[1].split()[0]) for d in draws]
    assert totals == sorted(totals) and totals[0] < totals[-1] == len(res.probes)  # grows as searches ask
    assert stream.getvalue().count("\n") == 1 and draws[-1].startswith(f"[{'#' * 30}] {len(res.probes)}/")
    assert "ETA" in draws[-1] and "elapsed" in draws[-1]
    rate_lines = [line for line in lines if line.startswith("rate search ")]
    assert len(rate_lines) == len(res.boundaries) == 4 and rate_lines[-1].startswith("rate search 4/4 done")
    assert any("lower rates do not help" in line for line in rate_lines)
    sized = next(s for s in in_order.sizing.values() if s.replicas)
    assert [line.split("): ", 1)[1] for line in lines if line.startswith("sizing")] == [
        f"{sized.group.label('a100-80gb').replace(f' x{sized.replicas}', '')}: {sized.replicas} replica(s) "
        f"(first guess {sized.estimate})"]
    assert lines[-1].startswith("sizing for 6.00 req/s done (")


def test_a_failing_run_stops_the_search_and_drops_the_queued_runs():
    def boom(probe):
        if probe.candidate.policy == "continuous" and probe.scale != 1:
            raise SimbatchError("probe", "it broke")
        from simbatch.capacity.candidates import run_probe

        return run_probe(probe)

    class Breaking(HeldExecutor):
        def submit(self, fn, item):
            return super().submit(boom, item)

    held = Breaking(fifo)
    with pytest.raises(SimbatchError, match="it broke"):
        plan(held)
    assert held.queue and all(f.cancelled() for f, _, _ in held.queue)  # nothing left to run


@pytest.mark.parametrize("kind", ["process", "dask"])
def test_a_pool_and_a_cluster_give_the_in_order_result(in_order, kind):
    """Real concurrency (two workers, runs finishing in whatever order they do): the same table."""
    if kind == "dask":
        pytest.importorskip("distributed")
    from simbatch.runs.executors import make_executor

    executor = make_executor(kind, 2, "local" if kind == "dask" else None)
    try:
        res = plan(executor)
    finally:
        executor.close()
    pd.testing.assert_frame_equal(pd.DataFrame(res.probes), pd.DataFrame(in_order.probes))
    assert res.boundaries == in_order.boundaries and res.sizing == in_order.sizing


# --- why: no worker idles while a search waits on another's slow probe --------------------------


class VirtualPool:
    """``workers`` workers on a virtual clock, first come first served (as a process pool): a job
    takes ``cost(item)`` time units from when a worker takes it. ``now`` ends as the makespan and
    ``busy`` as the work done, so idle time can be counted without timing anything real."""

    def __init__(self, workers, cost):
        self.cost, self.now, self.busy = cost, 0.0, 0.0
        self.free = [0.0] * workers  # when each worker is next free
        self.queue, self.running = [], []

    def submit(self, fn, item):
        future = Future()
        self.queue.append((future, fn, item))
        return future

    def wait_any(self, futures):
        self._start()
        end = min(e for e, _, _, _ in self.running)
        self.now = max(self.now, end)
        done = [r for r in self.running if r[0] <= self.now]
        self.running = [r for r in self.running if r[0] > self.now]
        for _, future, fn, item in done:
            future.set_result(fn(item))
        return {future for _, future, _, _ in done}

    def map(self, fn, items, on_done=None):
        futures = [self.submit(fn, item) for item in items]
        while not all(f.done() for f in futures):
            self.wait_any(futures)
        return [f.result() for f in futures]

    def _start(self):
        while self.queue and min(self.free) <= self.now or self.queue and not self.running:
            i = self.free.index(min(self.free))
            future, fn, item = self.queue.pop(0)
            start = max(self.now, self.free[i])
            self.free[i] = start + self.cost(item)
            self.busy += self.cost(item)
            self.running.append((self.free[i], future, fn, item))


def makespans(bounds, cost, workers=2):
    """(rounds, concurrent): the virtual pools after driving one rate search per bound to its end
    in lockstep rounds and concurrently, with the same answers checked equal."""
    def holds(item):
        return item[1] <= bounds[item[0]]

    rounds = VirtualPool(workers, cost)
    in_rounds = drive({b: rate_search(1.0, 0.05) for b in bounds}, lambda asked: rounds.map(holds, asked))
    pool, keys = VirtualPool(workers, cost), {}

    def ask(key, k):
        keys[pool.submit(holds, (key, k))] = key

    def answers():
        done = pool.wait_any(list(keys))
        return [(keys.pop(f), f.result()) for f in list(keys) if f in done]  # in submission order

    assert drive_concurrently({b: rate_search(1.0, 0.05) for b in bounds}, ask, answers) == in_rounds
    assert pool.busy == rounds.busy  # the same probes: the same work
    return rounds, pool


def test_concurrent_searches_leave_no_worker_idle_where_rounds_did():
    """Three searches of 7, 7 and 10 probes on two workers: each of the first seven rounds runs
    three probes in two probe times, a worker idle for one; concurrently a worker idles only
    once too few probes are left to fill both. With the long search's probes three times as
    slow, every round waits for its slow probe; concurrently the others run meanwhile and the
    plan ends within one probe of that search's own chain. Same answers, same work (virtual
    clock: no timing)."""
    bounds = {"a": 0.37, "b": 3.0, "c": 20.0}  # 7, 7 and 10 probes

    def idle(pool):
        return 2 * pool.now - pool.busy

    rounds, pool = makespans(bounds, lambda item: 1.0)
    assert rounds.busy == 24 and rounds.now == 7 * 2 + 3 * 1
    assert pool.now < rounds.now and idle(pool) <= 0.5 * idle(rounds)
    rounds, pool = makespans(bounds, lambda item: 3.0 if item[0] == "c" else 1.0)
    # each of seven rounds: the slow probe waits for a worker behind a fast one, then runs alone
    assert rounds.busy == 44 and rounds.now == 7 * (1 + 3) + 3 * 3
    assert pool.now <= 10 * 3 + 3 < rounds.now and idle(pool) <= 0.6 * idle(rounds)


def test_the_command_prints_a_log_line_above_the_live_bar(capsys):
    """On a terminal the bar's line is blanked before a log line and drawn again after it, so
    the two never share a line."""
    from simbatch.commands.capacity import _SearchBar

    stream = io.StringIO()
    bar = _SearchBar()
    bar.progress = Progress(4, stream=stream, live=True)
    drawn = stream.getvalue()
    bar.log("rate search 1/2 done")
    assert capsys.readouterr().out == "rate search 1/2 done\n"
    after = stream.getvalue()[len(drawn):]
    assert after.startswith("\r" + " " * len(drawn.strip("\r")) + "\r")  # blanked
    assert after.endswith("0/4 runs, elapsed 0:00, ETA ?")  # and drawn again
