"""Judging two runs: verdicts from repeats and evidence, the work and kernel diffs, a night screened against its
history. Pure: data in, verdicts out; nothing here reads or writes the disk or starts a process."""
