"""Which machine a profile was measured on, and whether it is this one (issue 16).

A profile's ``device:`` mapping (written by ``simbatch calibrate``,
:func:`simbatch.backends.device.device_facts`) names the machine its
timings come from. Per-operator times move a lot between machines of one
"kind": on this project's 2-core machines, an AMD EPYC profile predicted an
Intel Xeon's steps with median errors of 17-40 % where it had given 7-12 % on
its own machine. So a profile is used for a validation only where the
*identity* fields below agree; the others are recorded and reported, not
required.

Identity, and why each one moves kernel times:

- ``kind`` and ``name``: the CPU model (with the cores this process may use)
  or the GPU's name;
- ``isa`` (CPU): the vector and matrix extensions torch's kernels dispatch on
  (AVX2, AVX-512 and its BF16/VNNI/FP16 parts, AMX);
- ``threads`` (CPU): torch's intra-op threads;
- ``memory_gib`` and ``capability`` (GPU): the board's memory and its compute
  capability (two boards of one name come with different memory);
- ``torch`` and ``cuda``: the library versions, whose kernels change between
  releases.

Noted only: the GPU ``driver`` and the ``clocks`` at calibration time (the
current clocks vary from one reading to the next; a difference is printed).

This module reads plain mappings and needs no torch.
"""

from __future__ import annotations

CPU_IDENTITY = ("kind", "name", "isa", "threads", "torch")
GPU_IDENTITY = ("kind", "name", "memory_gib", "capability", "torch", "cuda")
NOTED = ("driver", "clocks")


def identity_fields(facts: dict) -> tuple[str, ...]:
    """The fields that must agree for a machine described by ``facts``."""
    return CPU_IDENTITY if facts.get("kind") == "cpu" else GPU_IDENTITY


def machine_differences(recorded: dict, here: dict) -> list[str]:
    """Why the machine a profile records (``recorded``) is not this one (``here``): one
    ``field: theirs there, ours here`` line per identity field that differs (empty: a match).
    A field this machine reports but the profile does not record counts as a difference."""
    recorded = recorded or {}
    out = []
    for key in identity_fields(here):
        mine, theirs = here.get(key), recorded.get(key)
        if mine == theirs:
            continue
        if theirs is None:
            out.append(f"{key}: not recorded in the profile, {_show(mine)} here")
        else:
            out.append(difference(key, theirs, mine))
    return out


def machine_notes(recorded: dict, here: dict) -> list[str]:
    """Differences in the fields that are recorded but not required (driver, clocks)."""
    recorded = recorded or {}
    return [difference(key, recorded.get(key), here.get(key)) for key in NOTED if recorded.get(key) != here.get(key)]


def difference(key: str, theirs, mine) -> str:
    """One line saying how a profile's ``key`` differs from this machine's."""
    return f"{key}: {_show(theirs)} there, {_show(mine)} here"


def _show(value) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, (list, tuple)):
        return "+".join(map(str, value)) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value)
