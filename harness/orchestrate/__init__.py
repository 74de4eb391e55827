"""The parent process: plans a run folder, starts one process (or torchrun group) per (cell, repeat) through
the cell's entry point, times it out, classifies how it ended, writes its row, resumes (`runner`, `launch`);
A/B runs (`ab`), the nightly helpers (`nightly`) and profiling runs (`profile`). It starts cells as
processes and never imports them."""
