"""Workflows built on the session: the interleaved A/B (`ab`, `ab_sides`, `rerun`, `looks`), `bisect`, the nightly's
questions and confirmations (`nightly`, `confirm`), the slot calibration (`calibrate`) and profiling (`profile`)."""
