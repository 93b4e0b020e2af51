"""The printing rule: after `set_printoptions()` torch and NumPy print the same text on every supported
version (run by `make versions` in each version set). The expected strings are torch 2.13's own."""

import numpy as np
import pytest
import torch
import torch._tensor_str as tensor_str

from attention_book.printing import set_printoptions


@pytest.fixture
def book_printing():
    saved = tensor_str._Formatter
    set_printoptions()
    yield
    tensor_str._Formatter = saved
    torch.set_printoptions(profile="default")
    np.set_printoptions(precision=8, suppress=True, linewidth=75)
    np.set_printoptions(suppress=False)


CASES = [  # (tensor, text): each case once crossed a rule of torch's formatter
    (torch.tensor([[0.9930, 6.1e-11], [2.5e-3, 1.0]]), "tensor([[0.9930, 0.0000],\n        [0.0025, 1.0000]])"),
    (torch.tensor([1.0, 5000.0]), "tensor([   1., 5000.])"),  # whole numbers over 3 orders of magnitude
    (torch.tensor([float("nan"), 1e-6]), "tensor([   nan, 0.0000])"),
    (torch.tensor([-2.5e-5, 12.0, 3e8]), "tensor([       -0.0000,        12.0000, 300000000.0000])"),
    (torch.tensor([0.1234, 0.5678]), "tensor([0.1234, 0.5678])"),  # never padded by any version
    (torch.tensor([[True, False]]), "tensor([[ True, False]])"),
]


@pytest.mark.parametrize("tensor, text", CASES, ids=range(len(CASES)))
def test_torch_prints_like_the_book(book_printing, tensor, text):
    assert str(tensor) == text


def test_lines_fit_the_page(book_printing):
    lines = str(torch.rand(4, 16)).splitlines()
    assert len(lines) == 8 and max(len(line) for line in lines) <= 79


def test_precision_changes_still_unpadded(book_printing):
    set_printoptions(precision=3)  # torch.set_printoptions(precision=3) alone would reset sci_mode
    assert str(torch.tensor([0.99304, 6.1e-11])) == "tensor([0.993, 0.000])"


def test_numpy_prints_fixed(book_printing):
    assert str(np.array([0.5, 1e-9, 1.0], dtype=np.float32)) == "[0.5 0.  1. ]"
    assert str(np.array([0.12345, 2e-7])) == "[0.1235 0.    ]"
