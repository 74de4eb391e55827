"""What the cell measures of its steps, beside the loop: the step clocks and NVTX ranges (`timing`), the CPU speed
`probe`, NVML `telemetry`, FLOP counting (`flops`), the profilers (`capture`) and what they count: operators and
kernels (`kernels`), the work of a step (`work`)."""
