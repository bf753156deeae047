"""DecodeGroup.run, the steady decode runs of iteration-level policies (issue 18's hot path).

It goes on past a step in which members finish when the engine loop would call it again
(asking the loop's questions in the loop's order), and the loop then does not ask the policy
twice at one step boundary; the results stay the step-by-step engine's.
"""

from simbatch.engine.check import fast_path_difference
from simbatch.engine.fast.decode_group import DecodeGroup
from simbatch.engine.simulation import simulate
from simbatch.policies.continuous import ContinuousPolicy
from simbatch.scenario.spec import from_dict


def light_load(seed: int = 0, replicas: int = 1):
    """Continuous batching under light load: the queue is often empty, so requests finish in
    the middle of steady runs that nothing else interrupts."""
    return from_dict({
        "workload": {"synthetic": {
            "num_requests": 120, "arrival": {"kind": "poisson", "rate": 3.0},
            "prompt": {"kind": "lognormal", "median": 300, "sigma": 0.8, "max": 1500},
            "output": {"kind": "lognormal", "median": 80, "sigma": 0.9, "max": 400}}},
        "model": "llama-2-7b", "hardware": "a100-40gb", "cost_model": {"kind": "roofline"},
        "cluster": {"replicas": replicas},
        "policy": {"kind": "continuous", "max_num_seqs": 48}, "seed": seed,
    })


def test_a_steady_run_goes_on_past_finishes():
    sc = light_load()
    finishing_steps = []
    original_run, original_pop = DecodeGroup.run, DecodeGroup.pop_finished
    current = []

    def counted_run(self, replica, steady):
        current.append(0)
        n = yield from original_run(self, replica, steady)
        finishing_steps.append(current.pop())
        return n

    def counted_pop(self):
        done = original_pop(self)
        if current and done:
            current[-1] += 1  # one more step of this run in which members finished
        return done

    DecodeGroup.run, DecodeGroup.pop_finished = counted_run, counted_pop
    try:
        fast = simulate(sc)
    finally:
        DecodeGroup.run, DecodeGroup.pop_finished = original_run, original_pop
    assert sum(finishing_steps) > 40  # requests finish inside steady runs
    # a run goes on past a step in which members finished (without that, every run's count is 0 or 1)
    assert max(finishing_steps) >= 3
    assert len(fast.log.step_table()["start_s"]) == len(simulate(sc, fast_forward=False).log.step_table()["start_s"])
    assert fast_path_difference(sc) is None


def test_the_policy_is_asked_once_per_step_boundary():
    # Two replicas, so that the steps of one interleave with the other's and with arrivals.
    sc = light_load(seed=1, replicas=2)
    asked = []
    original = ContinuousPolicy.steady_run

    def counted(self):
        # which policy, at how many of the whole log's steps, in which state: asking twice
        # with all of these unchanged is asking twice at one boundary (an idle replica woken by
        # an arrival is asked again with one more request waiting)
        asked.append((id(self), len(self.log_steps()), len(self.waiting), len(self.running), self.kv.num_used))
        return original(self)

    logs = []
    ContinuousPolicy.steady_run = counted
    ContinuousPolicy.log_steps = lambda self: logs[0].steps["start_s"]
    original_init = ContinuousPolicy.__init__

    def init(self, params, kv, note=lambda m: None):
        original_init(self, params, kv, note)
        if not logs:
            logs.append(note.__self__)  # the run's EventLog (its note method)

    ContinuousPolicy.__init__ = init
    try:
        simulate(sc)
    finally:
        ContinuousPolicy.steady_run, ContinuousPolicy.__init__ = original, original_init
        del ContinuousPolicy.log_steps
    assert len(asked) > 200
    repeats = sum(1 for a, b in zip(asked, asked[1:]) if a == b)
    assert repeats == 0
