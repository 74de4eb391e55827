"""The matrix file: a TOML file parsed (`parse`, cross-section `rules`) into typed, validated configuration
(`sections`, `executor`; each knob declared through `knobs`, documented by `reference`), expanded into cells with
stable ids and a (cell, repeat) schedule (`cells`), and the contract by which the parent starts a cell's process
(`job`). Pure: imports no torch, touches no device, writes nothing."""
