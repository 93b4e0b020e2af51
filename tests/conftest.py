"""Test-session set-up that must happen before any test module is imported."""

import os

import torch

# Chapter 8's Triton kernel is tested in Triton's interpreter when there is no GPU; the switch is read
# when triton is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# TensorFlow (chapter 6) and triton (chapter 8) each bundle LLVM. Imported in that order into one
# process, LLVM aborts it ("inconsistency in registered CommandLine options"); triton first works.
try:
    import triton  # noqa: F401
except ImportError:  # not on Linux: test_triton_attention.py skips itself
    pass
