"""Parameter sweeps: a grid over a scenario, run on an executor, one tidy table (docs/sweeps.md).

>>> import tempfile
>>> from simbatch import load_scenario
>>> from simbatch.sweep import parse_grid_args, run_sweep
>>> sc = load_scenario("classroom")
>>> table = run_sweep(sc, parse_grid_args(["policy.kind=static,continuous"]), tempfile.mkdtemp())
>>> list(table["policy.kind"]), list(table["completed"])
(['static', 'continuous'], [4, 4])
"""

from simbatch.sweep.grid import Grid, Point, expand, parse_grid_args, run_id, section_grid, sweep_grid
from simbatch.sweep.progress import Progress
from simbatch.sweep.runner import METRIC_COLUMNS, run_point, run_sweep

__all__ = ["Grid", "METRIC_COLUMNS", "Point", "Progress", "expand", "parse_grid_args", "run_id", "run_point",
           "run_sweep", "section_grid", "sweep_grid"]
