"""Named mistakes for the instant feedback of an installed student (course tooling, issue 40).

Where the grader's checks are left out, `feedback.replay` knows only the inputs, the student's answer and the
reference's stored answer. Many common mistakes can still be named from those three alone: a result that is
the transpose of the expected one, a constant factor such as a missing 1/√d_k, weights whose rows do not sum
to 1 or that sum to 1 over the wrong axis, a mask applied after the softmax, weight on positions the mask
blocks, NaN where the answer is finite, the right sizes in the wrong order. Each function returns a sentence
or None; `name_the_mistake` tries them in turn. No reference answer is computed here.
"""

import math

import numpy as np

TOLERANCE = {"atol": 1e-5, "rtol": 1e-4}


def close(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, equal_nan=False, **TOLERANCE))


def shape_order(got_shape: tuple, expected_shape: tuple) -> str | None:
    """The right sizes in another order: a missing or extra transpose/permute."""
    if got_shape != expected_shape and sorted(got_shape) == sorted(expected_shape):
        return (f"your result has the right sizes in another order, {got_shape} instead of {expected_shape}: "
                "a transpose or permute is missing or extra")
    return None


def not_finite(got: np.ndarray, expected: np.ndarray) -> str | None:
    """NaN or ±inf where the answer is finite."""
    bad = ~np.isfinite(got) & np.isfinite(expected)
    if not bad.any():
        return None
    at = [int(i) for i in np.argwhere(bad)[0]]
    return (f"your result has {got[tuple(at)]} at {at} where the expected value is finite: a row whose every "
            "score is −inf (all keys masked) or an exp that overflowed (subtract each row's maximum first)")


def transposed(got: np.ndarray, expected: np.ndarray) -> str | None:
    """The last two axes swapped: queries and keys (or rows and columns) exchanged."""
    if got.ndim >= 2 and expected.shape[-1] == expected.shape[-2] and close(got, np.swapaxes(expected, -1, -2)):
        return ("your result is the transpose of the expected one (its last two axes swapped): check which axis "
                "holds the queries and which the keys, or multiply in the other order")
    return None


def constant_factor(got: np.ndarray, expected: np.ndarray, args) -> str | None:
    """got = c · expected for one constant c ≠ 1; named as √d when c is the root of a size in the inputs."""
    usable = np.abs(expected) > 1e-6
    if usable.sum() < 2:
        return None
    ratios = got[usable] / expected[usable]
    c = float(np.median(ratios))
    if not np.isfinite(c) or abs(c - 1) < 1e-3 or not close(got, c * expected):
        return None
    sizes = {int(s) for a in args for s in getattr(a, "shape", ()) if int(s) > 1}
    for d in sorted(sizes):
        root = math.sqrt(d)
        if abs(c - root) < 1e-3 * root:
            return (f"your result is √{d} = {root:.4f} times the expected one: a 1/√d scale is missing "
                    "(or applied in the wrong place)")
        if abs(c - 1 / root) < 1e-3 / root:
            return f"your result is 1/√{d} times the expected one: the 1/√d scale is applied twice"
    return f"your result is {c:.4f} times the expected one everywhere: a constant factor is missing or extra"


def rows_of_weights(got: np.ndarray, expected: np.ndarray) -> str | None:
    """The expected result is weights (each row sums to 1 and is ≥ 0): name what is wrong with the rows."""
    if expected.ndim < 2 or (expected < -1e-6).any() or not np.allclose(expected.sum(-1), 1, atol=1e-4):
        return None
    sums = got.sum(-1)
    blocked = expected == 0
    if np.allclose(sums, 1, atol=1e-4):
        if blocked.any() and (np.abs(got[blocked]) > 1e-6).any():
            at = [int(i) for i in np.argwhere(blocked & (np.abs(got) > 1e-6))[0]]
            return (f"your weights give {got[tuple(at)]:.4f} to {at}, a position the expected weights block: "
                    "the mask is missing, or blocks the wrong side of the diagonal")
        return None
    if got.shape[-1] == got.shape[-2] and np.allclose(got.sum(-2), 1, atol=1e-4):
        return ("your weights sum to 1 down each column, not along each row: the softmax runs over the wrong "
                "axis; each query's weights over the keys (the last axis) must sum to 1")
    renormalised = got / np.where(np.abs(sums) > 1e-12, sums, 1)[..., None]  # each row scaled to sum 1
    if blocked.any() and np.allclose(got[blocked], 0, atol=1e-6) and (got >= -1e-6).all() \
            and (sums < 1 - 1e-4).any() and close(renormalised, expected):
        return ("the blocked positions are 0 but your rows sum to less than 1: the mask was applied after the "
                "softmax; fill the blocked scores with −inf before it, so the visible weights renormalise")
    at = [int(i) for i in np.argwhere(~np.isclose(sums, 1, atol=1e-4))[0]]
    return (f"these are attention weights, so every row must sum to 1; your row {at} sums to "
            f"{float(sums[tuple(at)]):.4f}: is the softmax missing, or taken over the wrong axis?")


def name_the_mistake(got: np.ndarray, expected: np.ndarray, args=()) -> str | None:
    """The first named mistake that fits, or None (the caller then says where the two first differ)."""
    if got.shape != expected.shape:
        return shape_order(tuple(got.shape), tuple(expected.shape))
    if expected.dtype.kind not in "fc" or got.dtype.kind not in "fciub":
        return None
    got, expected = got.astype(np.float64), expected.astype(np.float64)
    if problem := not_finite(got, expected):
        return problem
    if not np.isfinite(expected).all():
        return None
    for diagnosis in (transposed, rows_of_weights):
        if problem := diagnosis(got, expected):
            return problem
    return constant_factor(got, expected, args)
