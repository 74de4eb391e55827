"""The parent process, in four rooms: the session that runs a run folder's jobs (`session`), where each job
runs (`placement`: slots, executors, launches), what a run costs before it runs (`cost`), and the workflows built
on them (`workflows`: A/B, bisect, nightly, calibration, profiling). It starts cells as processes and never
imports them."""
