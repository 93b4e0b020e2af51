"""What every chapter's checks share: the registry entry, the verdict, the random inputs and the feedback
helpers for shapes and values (course tooling; the checks themselves are in `ch01` … `ch11`)."""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..spy import PRODUCTS, spy_tensor  # noqa: F401 - the checks import them from here

CASES = 20  # random inputs per check
WORDS = "the cat sat on a mat and ate one fish while it rained outside".split()


TENSORFLOW = ("tensorflow", "keras")  # a `Check.imports` for the exercises that run Keras


@dataclass(frozen=True)
class Check:
    """A registry entry: the check function, the name of the function the solution cell defines, and the
    dotted names of what the solution may not call (the package's and the library's versions of what the
    exercise builds; the grader makes them raise inside the submission, and the exercise's markdown names
    them in its "Write it yourself" line)."""

    run: Callable  # (student function, seed) -> problem or None
    function: str
    forbidden: tuple[str, ...] = ()
    # An exercise that asks for a method ("in blocks", "without the (T, S) matrix"): the most elements any
    # tensor the function makes may have, from its arguments, and what to say when one has more.
    largest: Callable | None = None
    method: str = ""
    # The arguments (by position) the exercise asks the function to change in place (a cache's buffers):
    # the grader's sandbox sends them back after each call and they are copied into the check's tensors.
    writes: tuple[int, ...] = ()
    # Modules (of `wire.PRELOADABLE`) the grader's sandbox imports once before it forks this exercise:
    # TensorFlow takes seconds to import, once per notebook instead of once per exercise.
    imports: tuple[str, ...] = ()


def case_generator(seed: int, case: int) -> torch.Generator:
    """The random inputs of one case: seed 0 in the notebooks, a secret one when grading."""
    return torch.Generator().manual_seed(1000 + case + 104_729 * seed)


def sizes(gen: torch.Generator, count: int, high: int) -> list[int]:
    """`count` random sizes from 1 to high − 1."""
    return [int(torch.randint(1, high, (1,), generator=gen)) for _ in range(count)]


def boolean_problem(mask) -> str | None:
    if not isinstance(mask, torch.Tensor):
        return f"the mask should be a boolean torch.Tensor (True = may attend), yours is {kind_of(mask)}"
    if mask.dtype != torch.bool:
        return f"the mask should be boolean (True = may attend), yours has dtype {mask.dtype}"
    return None


def kind_of(value) -> str:
    """What a student's answer is, in words: "None", "a list", "a tuple", "a numpy.ndarray of dtype bool"."""
    if value is None:
        return "None"
    name = type(value).__name__ if type(value).__module__ == "builtins" else \
        f"{type(value).__module__.split('.')[0]}.{type(value).__name__}"
    dtype = f" of dtype {value.dtype}" if hasattr(value, "dtype") else ""
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}{dtype}"


def shape_problem(got, expected_shape, what: str) -> str | None:
    if not hasattr(got, "shape"):  # a list, a tuple, a number: it has no shape to compare
        return f"{what} should be a tensor of shape {tuple(expected_shape)}, yours is {kind_of(got)}"
    shape = tuple(got.shape)
    if shape != tuple(expected_shape):
        return f"{what} should have shape {tuple(expected_shape)}, yours has {shape}"
    return None



def as_array(got) -> np.ndarray:
    return got.detach().double().numpy() if isinstance(got, torch.Tensor) else np.asarray(got, dtype=np.float64)


def value_problem(got, expected, what: str, atol: float = 1e-5) -> str | None:
    """None when `got` equals `expected` (shape, then values), else where they first differ."""
    if problem := shape_problem(got, tuple(expected.shape), what):
        return problem
    got, expected = as_array(got), as_array(expected)
    wrong = np.argwhere(~np.isclose(got, expected, atol=atol, rtol=1e-4))
    if len(wrong) == 0:
        return None
    at = tuple(int(i) for i in wrong[0])
    return f"{what}{list(at)} is {got[at]:.4f}, expected {expected[at]:.4f}"


def matches(got, expected, atol: float = 1e-5) -> bool:
    try:
        return tuple(got.shape) == tuple(expected.shape) and np.allclose(as_array(got), as_array(expected), atol=atol)
    except (AttributeError, TypeError, ValueError):
        return False
