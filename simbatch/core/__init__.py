"""The simulator's shared types: a request's state, the step plan, the event log, typed
parameter sections, the KV cache's blocks and prefix cache, and the horizon of simulated time.
They import nothing from simbatch but its errors.
"""
