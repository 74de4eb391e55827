"""The `nvbench` commands: one module per command, each adding its own flags and calling the library."""
