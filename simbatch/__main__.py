"""``python -m simbatch`` runs the command line."""

import sys

from simbatch.cli import main

sys.exit(main())
