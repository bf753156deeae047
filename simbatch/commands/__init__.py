"""One module per ``simbatch`` subcommand, each with ``NAME``, ``HELP``, ``add_arguments`` and ``run``.

Adding a command means writing its module and listing it in :data:`COMMANDS`.
"""

from simbatch.commands import calibrate, capacity, compare, listing, report, run, sweep, validate

COMMANDS = [run, compare, report, sweep, capacity, calibrate, validate, listing]
