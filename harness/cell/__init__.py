"""One cell's process (`python -m harness.cell`): the `worker` that conducts it (its `context`, then `build`,
`warmup` and `measure` over the step `loop`, validation and the row's figures in `metrics`), the `engine` (one
step of the `recipe`; CUDA `graphs`), the measured loop's clocks and NVTX ranges (`timing`), its instruments
(NVML `telemetry`, profiler `capture`, the CPU speed `probe`), FLOP counting and MFU (`flops`), and the test
faults and fire drills (`faults`). The only code that touches a GPU."""
