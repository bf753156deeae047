"""The torch device a backend or a calibration runs on: resolving it, the dtypes it runs
in, and facts about it written beside the numbers (below both :mod:`simbatch.backends` and
:mod:`simbatch.calibrate`).

Everything here is best effort: a fact that cannot be read (no ``nvidia-smi``,
no ``/proc/cpuinfo``) is ``None`` rather than an error, because a profile
without clocks is still a valid profile.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import torch

from simbatch.errors import SimbatchError

_SMI_CLOCKS = "clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem"
# CPU extensions torch's kernels (oneDNN, its own vectorised code) dispatch on: a profile
# measured with AMX or AVX-512 does not price a machine without them (simbatch.catalog.machine).
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_tile", "amx_bf16",
             "amx_int8")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def default_dtype(device_type: str) -> str:
    """bfloat16 on a GPU (what serving engines run), float32 on CPU (where bf16 GEMMs are slow)."""
    return "bfloat16" if device_type == "cuda" else "float32"


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` or ``cuda:N`` as a torch device, if this machine has it."""
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise SimbatchError("--device", f"expected cpu, cuda or cuda:N, got {name!r} ({exc})") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SimbatchError("--device", f"CUDA is not available to torch {torch.__version__} here; "
                                            "use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise SimbatchError("--device", f"{name}: only {torch.cuda.device_count()} GPU(s) present")
    elif device.type != "cpu":
        raise SimbatchError("--device", f"expected cpu, cuda or cuda:N, got {name!r}")
    return device


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def device_kind(device: torch.device) -> str:
    """A short slug naming the device: ``cpu``, or the GPU's name (``h100-80gb-hbm3``)."""
    if device.type == "cpu":
        return "cpu"
    name = torch.cuda.get_device_name(device).lower().removeprefix("nvidia").strip()
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "cuda"


def device_facts(device: torch.device, threads: int) -> dict:
    """The ``device:`` mapping of ``profile.yaml``: kind, name, versions, clocks, threads, and on
    a CPU its instruction-set extensions, on a GPU its memory and compute capability (what
    :mod:`simbatch.catalog.machine` compares)."""
    facts = {"kind": device_kind(device), "name": _device_name(device), "torch": str(torch.__version__),
             "driver": None, "cuda": None, "clocks": None, "threads": threads}
    if device.type == "cpu":
        facts["isa"] = cpu_extensions()
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts["memory_gib"] = round(props.total_memory / 2**30, 1)
        facts["capability"] = f"{props.major}.{props.minor}"
        facts["cuda"] = torch.version.cuda
        facts["driver"] = _smi_query("driver_version", device)
        clocks = _smi_query(_SMI_CLOCKS, device)
        if clocks:
            # nvidia-smi answers "1980, 2619, 1980, 2619" (MHz, in the order asked)
            values = [v.strip() for v in clocks.split(",")]
            facts["clocks"] = {k.replace(".", "_") + "_mhz": _number(v) for k, v in zip(_SMI_CLOCKS.split(","), values)}
    return facts


def cpu_extensions() -> list[str] | None:
    """The :data:`ISA_FLAGS` this CPU has (from ``/proc/cpuinfo``), or None where unreadable."""
    line = _cpuinfo("flags")
    if line is None:
        return None
    flags = set(line.split())
    return [flag for flag in ISA_FLAGS if flag in flags]


def _cpuinfo(key: str) -> str | None:
    """The value of the first ``/proc/cpuinfo`` line starting with ``key`` (None where absent)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(key)), None)
    except OSError:
        return None


def available_memory(device: torch.device) -> int:
    """Bytes free for one benchmark's tensors: free GPU memory, or MemAvailable on CPU."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device`` (a no-op on CPU, where torch runs eagerly)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def nvidia_smi_text() -> str | None:
    """The plain ``nvidia-smi`` table, or None where the tool is absent or fails."""
    return _run(["nvidia-smi"])


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{_cpuinfo('model name') or 'unknown CPU'} ({available_cores()} cores)"


def _smi_query(fields: str, device: torch.device) -> str | None:
    index = device.index if device.index is not None else torch.cuda.current_device()
    out = _run(["nvidia-smi", f"--id={index}", f"--query-gpu={fields}", "--format=csv,noheader,nounits"])
    return out.strip().splitlines()[0] if out and out.strip() else None


def _run(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _number(text: str):
    try:
        value = float(text)
    except ValueError:
        return None  # "[N/A]" on some boards
    return int(value) if value.is_integer() else value
