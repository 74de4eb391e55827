"""The parent process: plans a run folder (`runfolder`), starts one process (or torchrun group) per (cell, repeat)
through the cell's entry point (`job`, `launch`) where the run's executor says (`executors`, `local`, `slurm`),
times it out, classifies how it ended (`classify`), writes its row, resumes (`runner`) and derives what the rows
give (`derive`); A/B runs (`ab`), the nightly helpers (`nightly`) and profiling runs (`profile`). It starts cells
as processes and never imports them."""
