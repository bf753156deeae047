"""Test kit: the small scenario the capacity tests search (the command line and its report)."""

# 40 requests of 512 + 64 tokens on one A100: a search over it takes seconds.
TINY_SCENARIO = """\
name: tiny
workload:
  synthetic: {num_requests: 40, arrival: {kind: poisson, rate: 2},
              prompt: {kind: constant, value: 512}, output: {kind: constant, value: 64}}
model: llama-2-7b
hardware: a100-80gb
policy: {kind: continuous}
"""
