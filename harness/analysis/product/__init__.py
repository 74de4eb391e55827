"""The products of the analysis, each assembled in one place: a comparison's report (load, compare, attach the
extras, write once: pipeline) and the extras that plug into it one way each (extras: work, kernels)."""
