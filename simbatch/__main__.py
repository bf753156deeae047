"""``python -m simbatch`` runs the command line."""

from simbatch.cli import console

console()
