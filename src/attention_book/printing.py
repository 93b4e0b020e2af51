"""How every chapter prints tensors and arrays, so that the text is the same on every supported version.

Each chapter's import cell calls `set_printoptions()`: 4 decimals, never scientific notation, lines of
at most 79 columns, for torch and NumPy alike. On torch releases whose fixed-point printing pads numbers
to the width of the scientific notation it was told not to use (`tensor([    0.9930,     0.0000])` where
newer releases print `tensor([0.9930, 0.0000])`; it happens when a tensor's nonzero values span more than
three orders of magnitude or one is below 1e-4), it also installs `FixedFormatter`, which computes the
width the way newer torch does. Nothing else of torch's printing changes.
"""

import numpy as np
import torch
import torch._tensor_str as tensor_str

PRECISION = 4  # decimals: what float32 gives alike on every processor (see the README, "make portability")
LINEWIDTH = 79  # the page's code column


class FixedFormatter(tensor_str._Formatter):
    """torch's element formatter, with the field width of fixed-point notation when that is what prints."""

    def __init__(self, tensor: torch.Tensor):
        super().__init__(tensor)
        if not (self.floating_dtype and not self.sci_mode and tensor.dtype in _PLAIN_FLOATS):
            return
        values = tensor.reshape(-1)
        values = values[torch.isfinite(values) & values.ne(0)].double()
        precision = tensor_str.PRINT_OPTS.precision
        if self.int_mode:  # whole numbers print as "3." : one more column than their digits
            widths = [len(f"{value:.0f}") + 1 for value in values.tolist()]
        else:
            widths = [len(f"{value:.{precision}f}") for value in values.tolist()]
        self.max_width = max([1, *widths])


_PLAIN_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def fixed_notation_is_padded() -> bool:
    """Whether this torch pads fixed-point numbers to their scientific width (2.8 does, 2.13 does not)."""
    saved, p = tensor_str.PRINT_OPTS.sci_mode, tensor_str.PRINT_OPTS.precision
    torch.set_printoptions(sci_mode=False)
    try:
        return str(torch.tensor([1.0, 1e-5])) != f"tensor([{1:.{p}f}, {0:.{p}f}])"
    finally:
        torch.set_printoptions(sci_mode=saved)


def set_printoptions(precision: int = PRECISION, linewidth: int = LINEWIDTH) -> None:
    """torch and NumPy print `precision` decimals, never in scientific notation, `linewidth` columns wide."""
    torch.set_printoptions(precision=precision, sci_mode=False, linewidth=linewidth)
    np.set_printoptions(precision=precision, suppress=True, linewidth=linewidth)
    if tensor_str._Formatter is not FixedFormatter and fixed_notation_is_padded():
        tensor_str._Formatter = FixedFormatter  # looked up by name each time a tensor is printed
