"""Statistics that stand without the run: the two-sample test of check=distribution, Bonferroni's
combination, bootstrap intervals of a ratio of sums and of a median, Wilson's binomial interval."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
from scipy.stats import chi2_contingency

MIN_EXPECTED = 5.0  # a chi-square bin's smallest expected count


def two_sample_pvalue(a: list, b: list) -> tuple[float, int]:
    """Chi-square test that samples a and b come from one distribution → (p-value, bins used).

    Categories are tokens or tuples of tokens. Expected count of category c on side i:
    n_i · (a_c + b_c) / (n_a + n_b). Categories whose smaller expected count is < 5 share one
    pooled bin (merged into the rarest kept category if the pool is itself too small). Fewer
    than two bins: nothing to tell apart, p = 1.
    """
    ca, cb = Counter(a), Counter(b)
    n_min, total = min(len(a), len(b)), len(a) + len(b)
    if n_min == 0:
        return 1.0, 0
    cols = sorted(set(ca) | set(cb), key=lambda t: (-(ca[t] + cb[t]), t))
    enough = [t for t in cols if (ca[t] + cb[t]) * n_min / total >= MIN_EXPECTED]
    rows = [[ca[t] for t in enough], [cb[t] for t in enough]]
    kept = set(enough)
    rest = [t for t in cols if t not in kept]
    if rest:
        pa, pb = sum(ca[t] for t in rest), sum(cb[t] for t in rest)
        if (pa + pb) * n_min / total >= MIN_EXPECTED or not enough:
            rows[0].append(pa)
            rows[1].append(pb)
        else:  # pool too small on its own: fold it into the rarest kept bin
            rows[0][-1] += pa
            rows[1][-1] += pb
    if len(rows[0]) < 2:
        return 1.0, len(rows[0])
    return float(chi2_contingency(rows, correction=False).pvalue), len(rows[0])


def bonferroni(pvalues: list[float]) -> float:
    """One p-value for "every test agrees": min(1, m · min_i p_i) over m tests."""
    return min(1.0, len(pvalues) * min(pvalues)) if pvalues else 1.0


def bootstrap_ratio(num_m, den_m, num_b, den_b, n_boot=2000, seed=0) -> tuple[float, float]:
    """95% percentile interval of (Σnum_m/Σden_m) ÷ (Σnum_b/Σden_b), resampling units."""
    num_m, den_m, num_b, den_b = map(np.asarray, (num_m, den_m, num_b, den_b))
    n = len(num_m)
    if n < 2:
        r = (num_m.sum() / den_m.sum()) / (num_b.sum() / den_b.sum())
        return float(r), float(r)
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    r = (num_m[idx].sum(1) / den_m[idx].sum(1)) / (num_b[idx].sum(1) / den_b[idx].sum(1))
    lo, hi = np.percentile(r, [2.5, 97.5])
    return float(lo), float(hi)


def bootstrap_median(x, n_boot=2000, seed=0) -> tuple[float, float]:
    """95% percentile interval of the median of x, resampling its elements."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2:
        return float(x[0]), float(x[0])
    idx = np.random.default_rng(seed).integers(0, len(x), size=(n_boot, len(x)))
    lo, hi = np.percentile(np.median(x[idx], axis=1), [2.5, 97.5])
    return float(lo), float(hi)


Z95 = 1.959964  # the normal quantile of a two-sided 95% interval


def wilson(accepted: float, n: float) -> tuple[float, float]:
    """Wilson's 95% score interval of a binomial share accepted/n:
    (p̂ + z²/2n ± z·√(p̂(1 − p̂)/n + z²/4n²)) ÷ (1 + z²/n)."""
    p, z2 = accepted / n, Z95 * Z95
    mid = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(mid - half, 0.0), min(mid + half, 1.0)
