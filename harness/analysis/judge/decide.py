"""The one place that turns a comparison's evidence into a verdict word, with its reason (pure).

Four answers for a judged cell:

- `regression` / `improvement`: some metric's test rejects (after the cell's multiplicity corrections),
  its whole interval lies on one side of 0, and its change is beyond the practical floor;
- `unchanged`: every tested metric's interval lies wholly inside [-floor, +floor]. That is equivalence
  shown, not assumed: an interval at level 1 - a inside the bounds is a two one-sided tests (TOST)
  rejection of "the change is beyond the floor" at a / 2 each side (Schuirmann, J. Pharmacokinet. Biopharm.
  15, 1987; Wellek, Testing Statistical Hypotheses of Equivalence, 2nd ed., 2010, ch. 1);
- `inconclusive`: everything else, with the reason and about how many repeats per side would likely
  decide it (`repeats_needed`).

Two more rules sit in front of those. A cell whose repeats can never reach the level (a permutation test's
smallest p-value is 2 / C(n + m, n)) is inconclusive whatever its numbers. And a comparison adjusted for the
machine-speed probe is trusted only when the probe is balanced between the sides: when the sides' probes
differ by more than their own spread explains, or by more than the floor, the adjustment extrapolates, so
the verdict falls back to the unadjusted change net of what the machine's change explains in proportion
(throughput in proportion to the probe's speed, with the probe's own uncertainty), and is `inconclusive`
unless that leaves a change beyond the floor ("machine speed differed between the sides: probe +X %").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from harness.catalogue import reasons
from scipy import special  # not scipy.stats: ~0.9 s of every command's start-up (reach_warning imports this)

REGRESSION = "regression"
IMPROVEMENT = "improvement"
UNCHANGED = "unchanged"
INCONCLUSIVE = "inconclusive"
WORDS = (REGRESSION, IMPROVEMENT, UNCHANGED, INCONCLUSIVE)

POWER = 0.8
"""The power at which `repeats_needed` sizes a comparison."""
MAX_REPEATS_SHOWN = 1000
"""Above this, `repeats_needed` says "more than 1000": for the spread seen, the change is too close to the floor for
any practical budget to decide."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    """One metric of one cell: its change in % with an interval, whether its test rejected, and the spread
    (standard deviation of log values within a side) that sizes more repeats."""

    name: str
    effect_pct: float
    ci_low_pct: float
    ci_high_pct: float
    significant: bool
    """The test rejected "no change" at the level the cell was tested at (BH across cells, Holm within)."""
    log_sd: float | None = None
    """Within-side standard deviation of log values (the adjusted fit's residual one where adjusted)."""
    higher_is_better: bool = True
    """The metric's direction (harness.catalogue.judged): which side of 0 a regression lies on."""
    worse: str = "slower"
    """The metric's word for a change beyond the floor the wrong way."""
    better: str = "faster"

    def call(self, floor_pct: float) -> str:
        """This metric alone: REGRESSION, IMPROVEMENT, UNCHANGED (interval inside the floor) or INCONCLUSIVE. The rule
        reads no unit: the effect, its interval and the floor in one (% for a cell's metrics; the kernel diff's
        seconds for an operator's time)."""
        down = self.significant and self.ci_high_pct < 0 and self.effect_pct <= -floor_pct
        up = self.significant and self.ci_low_pct > 0 and self.effect_pct >= floor_pct
        if down or up:
            return REGRESSION if down == self.higher_is_better else IMPROVEMENT
        if -floor_pct <= self.ci_low_pct and self.ci_high_pct <= floor_pct:
            return UNCHANGED
        return INCONCLUSIVE

    def text(self) -> str:
        return f"{self.effect_pct:+.1f}% [{self.ci_low_pct:+.1f}, {self.ci_high_pct:+.1f}]"


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeBalance:
    """How the machine-speed probe compares between the sides of an adjusted comparison."""

    shift_pct: float
    """Change of the probe's time, candidate vs baseline, in % (+ = the candidate's machine was slower)."""
    p_value: float
    """Welch's t test of "same mean log probe time" on the two sides' probes."""
    balanced: bool
    """The shift is within the floor and within what the sides' own spread explains: the adjusted comparison
    stands. Unbalanced, the machine itself changed between the sides and the verdict says so."""
    net: Evidence | None = None
    """Unbalanced only: the unadjusted throughput change net of the most the probe's shift explains."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """The call on one cell: its word, why, and on which metric it rests."""

    verdict: str
    reason: str
    """Why, in words; the change itself is written by the caller."""
    code: str
    """Why, as a code (harness.catalogue.reasons)."""
    decided_by: str
    """The metric the verdict rests on."""
    repeats_needed: int | None = None
    """Inconclusive only: about how many usable repeats per side would likely decide the cell."""


# ---------------------------------------------------------------------------------------------
# what repeats can reach


def smallest_permutation_p(n_candidate: int, n_baseline: int) -> float:
    """The smallest two-sided p-value an exact permutation test of these sizes can give: 2 / C(n + m, n)."""
    if n_candidate < 1 or n_baseline < 1:
        return 1.0
    return min(1.0, 2 / math.comb(n_candidate + n_baseline, n_candidate))


def repeats_to_reach(alpha: float) -> int:
    """The fewest repeats per side (equal sides) with which a permutation test can reach p <= alpha."""
    n = 2
    while smallest_permutation_p(n, n) > alpha * (1 + 1e-12):
        n += 1
    return n


def reach_problem(repeats: int, alpha: float, *, what: str) -> str | None:
    """One line when `repeats` per side can never give p <= alpha (None when they can); `what` names the knob."""
    if repeats >= repeats_to_reach(alpha):
        return None
    return (f"{what}: a permutation test of {repeats} + {repeats} repeats cannot reach p <= {alpha:.3g} "
            f"(its smallest p is {smallest_permutation_p(repeats, repeats):.3g}); "
            f"{repeats_to_reach(alpha)} or more a side can")


def repeats_needed(evidence: Sequence[Evidence], *, floor_pct: float, alpha: float, n_now: int,
                   n_min: int = 2) -> int | None:
    """About how many repeats per side would likely decide an inconclusive cell, from the observed spread.

    Method: a normal approximation of a two-sample comparison of means on log scale at equal sides,
    n = 2 ((z_{1-a/2} + z_power) s / margin)^2, with s the within-side standard deviation of log values and
    power POWER. The margin is the distance the interval must clear: for a metric whose point change lies
    beyond the floor, the change itself (the interval must leave 0), and the point's distance from the floor
    must stay clear of it too (n = 2 (z_power s / (|d| - floor))^2, the larger of the two); for one inside
    it, the room between the change and the floor (the interval must fit inside the floor: the TOST sample
    size, Chow, Shao & Wang, Sample Size Calculations in Clinical Research, 2nd ed., 2008, sec. 3.2). Any metric beyond the floor can
    decide the cell, so the smallest of those counts; otherwise every metric must fit inside, so the
    largest. At least n_now + 1, n_min, and what a permutation test needs to reach alpha. None without a
    spread; MAX_REPEATS_SHOWN + 1 where the change sits on the floor."""
    z = float(special.ndtri(1 - alpha / 2) + special.ndtri(POWER))
    beyond, inside = [], []
    for e in evidence:
        if e.log_sd is None or not math.isfinite(e.log_sd) or e.log_sd <= 0:
            continue
        d = abs(math.log1p(e.effect_pct / 100))
        f = abs(math.log1p((floor_pct if e.effect_pct >= 0 else -floor_pct) / 100))  # the floor on d's side
        if d >= f:  # the interval must leave 0, and the change must likely stay beyond the floor
            z_power = float(special.ndtri(POWER))
            n = max(2 * (z * e.log_sd / d) ** 2, 2 * (z_power * e.log_sd / (d - f)) ** 2 if d - f > 1e-9 else math.inf)
            beyond.append(n)
        else:  # the interval must fit inside the floor
            inside.append(2 * (z * e.log_sd / (f - d)) ** 2)
    if not beyond and not inside:
        return None
    n = min(beyond) if beyond else max(inside)
    if not math.isfinite(n) or n > MAX_REPEATS_SHOWN:
        return MAX_REPEATS_SHOWN + 1
    return max(math.ceil(n), n_now + 1, n_min, repeats_to_reach(alpha))


def needed_text(n: int | None) -> str:
    if n is None:
        return "more repeats needed (no spread to size them from)"
    if n > MAX_REPEATS_SHOWN:
        return f"needs more than {MAX_REPEATS_SHOWN} repeats a side: for this spread the change is too close to the floor"
    return f"needs ~{n} repeats a side"


# ---------------------------------------------------------------------------------------------
# the machine-speed probe


def probe_balance(candidate_probe: Sequence[float], baseline_probe: Sequence[float], *, floor_pct: float,
                  alpha: float, confidence: float) -> tuple[float, tuple[float, float], float, bool]:
    """(shift %, its interval in %, Welch p, balanced) of the probe times of two sides. Balanced: the shift is
    within the floor and Welch's t test on log probe times does not reject at alpha (Welch, Biometrika 34,
    1947; the interval is Welch's t interval of the difference of mean log times, at `confidence`)."""
    c = [math.log(x) for x in candidate_probe]
    b = [math.log(x) for x in baseline_probe]
    diff = sum(c) / len(c) - sum(b) / len(b)
    shift = 100 * math.expm1(diff)
    if len(c) < 2 or len(b) < 2:
        return shift, (shift, shift), math.nan, abs(shift) <= floor_pct
    var_c, var_b = statistics.variance(c) / len(c), statistics.variance(b) / len(b)
    se = math.sqrt(var_c + var_b)
    if se <= 0:  # no spread on either side: any shift at all is a difference
        return shift, (shift, shift), 1.0 if abs(diff) < 1e-12 else 0.0, abs(diff) < 1e-12
    df = (var_c + var_b) ** 2 / (var_c ** 2 / (len(c) - 1) + var_b ** 2 / (len(b) - 1))
    p = float(2 * special.stdtr(df, -abs(diff) / se))  # Student's t: its survival function, then its quantile
    half = float(special.stdtrit(df, (1 + confidence) / 2)) * se
    interval = (100 * math.expm1(diff - half), 100 * math.expm1(diff + half))
    return shift, interval, p, abs(shift) <= floor_pct and p > alpha


def net_of_probe(unadjusted: Evidence, shift_pct: float, shift_ci_pct: tuple[float, float]) -> Evidence:
    """The unadjusted throughput change net of what the machine's change explains in proportion.

    A machine whose probe took X % longer explains a throughput change of 1 / (1 + X) - 1 if the cell's work
    scales with the machine's speed (slope -1 in logs: the physical model, not the fitted slope, which an
    unbalanced probe would extrapolate). On log scale the net change is log(1 + u) + log(1 + X); its interval
    adds the two intervals' ends (the unadjusted change's and the probe shift's Welch interval), so the
    probe's own uncertainty widens it. The unadjusted test's rejection carries over."""
    lo, hi = shift_ci_pct

    def net(change_pct: float, probe_pct: float) -> float:
        return 100 * math.expm1(math.log1p(change_pct / 100) + math.log1p(probe_pct / 100))

    return Evidence(name=unadjusted.name, effect_pct=net(unadjusted.effect_pct, shift_pct),
                    ci_low_pct=net(unadjusted.ci_low_pct, lo), ci_high_pct=net(unadjusted.ci_high_pct, hi),
                    significant=unadjusted.significant, log_sd=unadjusted.log_sd)


# ---------------------------------------------------------------------------------------------
# the decision


def decide(evidence: Sequence[Evidence], *, floor_pct: float, alpha: float, n_candidate: int, n_baseline: int,
           min_repeats: int = 2, probe: ProbeBalance | None = None) -> Decision:
    """The verdict of a cell from its metrics' evidence (throughput first). `alpha`: the level a metric's
    test must be able to reach (the report's, split over looks); `min_repeats`: the fewest usable repeats
    a side for a cell to be judged at all; `probe`: the machine-speed probe's balance where the evidence is
    adjusted for it."""
    if not evidence:
        raise ValueError("decide needs the evidence of at least one metric")
    n_now = min(n_candidate, n_baseline)

    def inconclusive(why: str, on: Sequence[Evidence], by: str, code: str) -> Decision:
        n = repeats_needed(on, floor_pct=floor_pct, alpha=alpha, n_now=n_now, n_min=min_repeats)
        if n is None:  # no spread to size from (one repeat a side): at least what the test needs to decide
            n = max(n_now + 1, min_repeats, repeats_to_reach(alpha))
        return Decision(verdict=INCONCLUSIVE, reason=f"{why}; {needed_text(n)}", code=code, decided_by=by,
                        repeats_needed=n)

    headline = evidence[0]
    smallest = smallest_permutation_p(n_candidate, n_baseline)
    if smallest > alpha * (1 + 1e-12):
        return inconclusive(f"{n_candidate} + {n_baseline} repeats usable: the test can never reach p <= {alpha:.3g} "
                            f"(its smallest p is {smallest:.3g})", evidence, headline.name, reasons.CANNOT_REACH)
    if n_now < min_repeats:
        return inconclusive(f"{n_candidate} + {n_baseline} repeats usable, fewer than the {min_repeats} a side asked "
                            f"for (--min-repeats)", evidence,
                            headline.name, reasons.TOO_FEW_REPEATS)
    if probe is not None and not probe.balanced:
        return _unbalanced(probe, headline, floor_pct, inconclusive)
    calls = [(e, e.call(floor_pct)) for e in evidence]
    for word in (REGRESSION, IMPROVEMENT):
        hit = next((e for e, c in calls if c == word), None)
        if hit is not None:
            return Decision(verdict=word, reason=_beyond(hit, word, floor_pct, len(evidence)), code=reasons.BEYOND_FLOOR,
                            decided_by=hit.name)
    if all(c == UNCHANGED for _, c in calls):
        nearest = max(evidence, key=lambda e: max(abs(e.ci_low_pct), abs(e.ci_high_pct)))
        return Decision(verdict=UNCHANGED, decided_by=nearest.name, code=reasons.INSIDE_FLOOR,
                        reason=f"every interval lies inside the ±{floor_pct:g}% floor (equivalence shown)")
    open_ = [e for e, c in calls if c == INCONCLUSIVE]
    worst = min(open_, key=lambda e: e.ci_low_pct)
    why, code = _why_open(worst, floor_pct, len(evidence))
    return inconclusive(why, open_, worst.name, code)


def _beyond(e: Evidence, word: str, floor_pct: float, k: int) -> str:
    whose = f"{e.name} " if k > 1 else ""
    return f"{whose}{e.worse if word == REGRESSION else e.better} beyond the {floor_pct:g}% floor"


def _why_open(e: Evidence, floor_pct: float, k: int) -> tuple[str, str]:
    """(why the metric is undecided, in words; its reason code)."""
    whose = f"{e.name}'s " if k > 1 else "the "
    if e.significant and (e.ci_high_pct < 0 or e.ci_low_pct > 0):
        return f"{whose}change is real but its interval straddles the ±{floor_pct:g}% floor", reasons.STRADDLES_FLOOR
    if e.significant:
        return f"{whose}test rejects but its interval includes 0", reasons.INCLUDES_ZERO
    return (f"{whose}test does not reject and its interval does not lie inside the ±{floor_pct:g}% floor",
            reasons.NOT_SHOWN)


def _unbalanced(probe: ProbeBalance, headline: Evidence, floor_pct: float, inconclusive) -> Decision:
    machine = "slower" if probe.shift_pct > 0 else "faster"
    said = f"machine speed differed between the sides: probe {probe.shift_pct:+.1f}% (the candidate's machine {machine})"
    net = probe.net
    if net is not None:
        call = net.call(floor_pct)
        if call in (REGRESSION, IMPROVEMENT):
            direction = "slower" if call == REGRESSION else "faster"
            return Decision(verdict=call, decided_by=headline.name, code=reasons.BEYOND_MACHINE,
                            reason=f"{said}; {direction} by {net.text()} beyond what the machine explains, "
                                   f"beyond the {floor_pct:g}% floor")
        return inconclusive(f"{said}; net of it {net.text()}, not beyond the {floor_pct:g}% floor", [headline],
                            headline.name, reasons.MACHINE_DIFFERED)
    return inconclusive(said, [headline], headline.name, reasons.MACHINE_DIFFERED)
