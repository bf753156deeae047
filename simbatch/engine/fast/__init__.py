"""The fast path: runs of steps the policy has described in advance, priced and logged.

A policy promises a steady run (:class:`~simbatch.policies.base.SteadyRun`, from its own
admission dry run) or a padded batch describes its remaining decode run
(:meth:`~simbatch.policies.padded_batch.PaddedBatch.decode_run`); this package only prices
those steps, advances SimPy time and logs them as the step-by-step engine would
(:func:`~simbatch.engine.fast.steps.fast_steps` is the replica's one call into it). It never
imports the policies (``tests/test_layering.py``): what a policy decides stays in its class.
"""
