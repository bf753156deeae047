"""simbatch: simulate LLM-inference batching policies on request traces."""

__version__ = "0.1.0"
