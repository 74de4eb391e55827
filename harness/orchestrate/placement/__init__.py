"""Where a job runs: the machine's cores and GPUs (`machine`), slots cut from them (`slots`, `packing`), chains of
jobs on slots (`lanes`), and the executors that start a launch (`executors`, `local`, `slurm`, `launch`)."""
