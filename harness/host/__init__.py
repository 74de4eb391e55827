"""The host's own accounting, read by the cell and the parent alike: CPU ticks from /proc and the one foreign-share
formula (`procstat`), and the meter that measures what else ran during a cell's window (`meter`). Imports nothing
of nvbench but the catalogue."""
