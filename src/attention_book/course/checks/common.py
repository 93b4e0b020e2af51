"""What every chapter's checks share: the registry entry, the verdict, the random inputs and the feedback
helpers for shapes and values (course tooling; the checks themselves are in `ch01` … `ch11`)."""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

CASES = 20  # random inputs per check
WORDS = "the cat sat on a mat and ate one fish while it rained outside".split()


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


class StudentRaised(Exception):
    """The student's function raised `name: message` (in the kernel or in the sandbox)."""

    def __init__(self, name: str, message: str):
        self.name, self.message = name, message
        super().__init__(f"{name}: {message}")


class Stopped(Exception):
    """Grading of the function cannot go on (its sandbox ended); the message says why."""




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



PRODUCTS = {"__matmul__", "__rmatmul__", "matmul", "mm", "bmm", "einsum", "tensordot", "linear", "addmm", "mv"}


def spy_tensor(tensor: torch.Tensor, log: list, flagged: set):
    """`tensor` as one that logs, in `log`, what is done to it or to what is computed from it before a matrix
    product: ("flagged", name) for an operation named in `flagged`, ("product", name) for a product that uses
    it (chapter 1's one-hot embedding, chapter 3's grouped-query attention without copies)."""

    class Spy(torch.Tensor):
        raw = True  # computed from the tensor without a product in between

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            given = [*args, *kwargs.values()]
            given += [item for a in given if isinstance(a, (list, tuple)) for item in a]  # torch.cat([k, k])
            spies = [a for a in given if isinstance(a, Spy)]
            raw = any(spy.raw for spy in spies)
            name = getattr(func, "__name__", "")
            if raw and name in flagged:
                log.append(("flagged", name))
            if raw and name in PRODUCTS:
                log.append(("product", name))
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **kwargs)
            if isinstance(out, torch.Tensor) and not isinstance(out, torch.nn.Parameter):
                out = out.as_subclass(Spy)
                out.raw = raw and name not in PRODUCTS
            return out

    spy = tensor.as_subclass(Spy)
    spy.raw = True
    return spy
