"""One cell's process (`python -m harness.cell`): the `worker` that conducts it (its `context`, then `build`,
`warmup` and `measure` over the step `loop`, validation and the row's figures in `metrics`), the `engine` (one
step of the `recipe`; CUDA `graphs`), the test faults and fire drills (`faults`); what it measures of its steps is
in `instruments/` (clocks and NVTX ranges, the CPU speed probe, NVML telemetry, FLOPs, profilers, counts), what
else ran beside it in harness.host. The only code that touches a GPU."""
