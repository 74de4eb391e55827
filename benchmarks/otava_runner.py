"""Runs under Apache Otava's own virtual environment (benchmarks/changepoints.py starts it; never imported by
nvbench): reads {"series": [[float, ...], ...], "max_pvalue": p, "min_magnitude": m, "window_len": w} as JSON on
stdin and prints, as JSON, the change point indices Otava finds in each series."""

import json
import sys

from otava.analysis import compute_change_points


def main() -> None:
    job = json.load(sys.stdin)
    out = []
    for values in job["series"]:
        points, _ = compute_change_points(values, window_len=job["window_len"], max_pvalue=job["max_pvalue"],
                                          min_magnitude=job["min_magnitude"])
        out.append(sorted(int(p.index) for p in points))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
