"""The bisection itself, pure: an ordered list of points (first-parent commits GOOD..BAD, or interpreters) whose first
is known good and last known bad, what each tested point turned out to be (bad, good, skipped) and which point to
test next (the middle of the open range; a skipped point's nearest untested neighbour, as `git bisect skip` does).
By time (by_time) a point is judged by A/Bs; by work (by_work) each counted item walks a Search of its own."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

BAD, GOOD, SKIPPED = "bad", "good", "skipped"


class BisectInputError(ValueError):
    """Bad input: one line each, exit 2."""


@dataclass
class Search:
    """Bisection over points[0] (good) .. points[-1] (bad) for the first bad point."""

    points: list[str]
    status: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.points) < 2:
            raise BisectInputError("bisect needs a good and a bad point with at least the bad one after the good")
        self.status.setdefault(0, GOOD)
        self.status.setdefault(len(self.points) - 1, BAD)

    @property
    def lo(self) -> int:
        """The last point known good before the first known bad."""
        return max(i for i, s in self.status.items() if s == GOOD and i < self.hi)

    @property
    def hi(self) -> int:
        """The first point known bad."""
        return min(i for i, s in self.status.items() if s == BAD)

    def candidates(self) -> list[int]:
        """Points between lo and hi not yet known: the first bad one is among them or is hi."""
        return [i for i in range(self.lo + 1, self.hi) if i not in self.status]

    def next(self) -> int | None:
        """The point to test next (nearest the middle of the open range, skipped ones left out), or None
        when the answer is known: hi is the first bad point, unless skipped points lie between lo and hi."""
        open_ = self.candidates()
        if not open_:
            return None
        middle = (self.lo + self.hi) / 2
        return min(open_, key=lambda i: (abs(i - middle), i))

    def record(self, index: int, outcome: str) -> None:
        if outcome not in (BAD, GOOD, SKIPPED):
            raise ValueError(outcome)
        self.status[index] = outcome

    def skipped_between(self) -> list[int]:
        return [i for i in range(self.lo + 1, self.hi) if self.status.get(i) == SKIPPED]

    def steps_left(self) -> int:
        """About how many more points a bisection of the open range tests (log2 of its size)."""
        n = len(self.candidates())
        return math.ceil(math.log2(n + 1)) if n else 0
