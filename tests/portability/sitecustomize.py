"""Imported by every Python process of a `make portability` run (it is on PYTHONPATH there).

torch caps the thread count it takes from OMP_NUM_THREADS at the number of cores, so a variant that
needs more threads than this machine has cores (3 on 2 cores) asks for them here, by
BOOK_TORCH_THREADS, before any notebook code runs.
"""

import os

if os.environ.get("BOOK_TORCH_THREADS"):
    import torch

    torch.set_num_threads(int(os.environ["BOOK_TORCH_THREADS"]))
