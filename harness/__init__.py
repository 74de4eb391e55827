"""nvbench: benchmark and profile deep-learning training recipes, one isolated process per matrix cell."""

__version__ = "0.1.0"
