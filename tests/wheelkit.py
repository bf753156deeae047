"""Build this checkout's wheel and install it into a fresh virtual environment, offline.

Shared by tests/test_packaging.py and tests/test_readme_commands.py: what a newcomer gets
from ``pip install .``, without the network (the build uses the setuptools already
installed; the dependencies come from this interpreter's site-packages).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What a clone does not carry (or a build leaves behind): never copied into a test's clone.
NOT_IN_A_CLONE = shutil.ignore_patterns(".git", "runs", "out", "build", "dist", "*.egg-info", "__pycache__",
                                        ".pytest_cache", ".hypothesis", ".ipynb_checkpoints")


def copy_checkout(dest: Path) -> Path:
    """A copy of this checkout as a fresh clone has it (no outputs, no build leftovers)."""
    return Path(shutil.copytree(ROOT, dest, ignore=NOT_IN_A_CLONE, symlinks=True))


def build_wheel(tmp: Path) -> Path:
    """The wheel of this checkout, built from a copy (setuptools writes build/ beside the sources)."""
    src = copy_checkout(tmp / "src")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "--no-index", "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-2000:]
    return next((tmp / "dist").glob("simbatch-*.whl"))


def make_venv(where: Path, wheel: Path) -> Path:
    """A fresh virtual environment at ``where`` with ``wheel`` installed (not editable); its bin/.

    ``--system-site-packages`` lends it numpy, pandas, simpy... so nothing is downloaded.
    Where this interpreter is itself a virtual environment, its site-packages are not the
    "system" ones, so a .pth file lends them too, after the new environment's own (whose
    simbatch therefore wins; .pth lines only add folders, they run no editable-install hook).
    """
    # Without pip of its own (ensurepip takes seconds): this interpreter's pip installs into it.
    made = subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(where)],
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-2000:]
    bindir = where / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / "python"
    if sys.prefix != sys.base_prefix:
        site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        Path(site, "zz_outer_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                              "--no-index", str(wheel)], capture_output=True, text=True)
    if install.returncode != 0 and "--python" in install.stderr:  # pip < 22.3: the venv's own pip
        subprocess.run([str(python), "-m", "ensurepip", "-q"], capture_output=True, check=True)
        install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                                 capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-2000:]
    return bindir
