import sys
from pathlib import Path

# tests import their kit (simkit.py) as a plain module
sys.path.insert(0, str(Path(__file__).resolve().parent))
