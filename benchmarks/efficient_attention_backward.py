"""Chapter 9's training measurement: a forward and a backward pass of naive, tiled and PyTorch's fused
attention on CPU as T grows; time and peak memory.

Run from the repository root (about ten minutes on a shared 2-core CPU):
    .venv/bin/python benchmarks/efficient_attention_backward.py
The result goes to src/attention_book/data/efficient_attention_backward_cpu.json, which chapter 9 plots.
As in efficient_attention.py, at each length every round runs the six calls (three methods, without and
with the causal mask) in turn, every round's seconds are stored, and the unmasked and causal rows of one
length come from the same rounds; peak memory is measured in a fresh process per point. One thread: on the
shared machine the book is built on, several other jobs hold the two cores, and a two-thread pool then
waits at every operation for its descheduled thread, a wait the tiled loop (hundreds of operations per
call) pays hundreds of times and the fused kernel once; one thread measures the algorithms instead.
"""

from functools import partial

import torch
from efficient_attention import CONDITIONS, HEAD_DIM, HEADS, sweep

from attention_book.measure import save_result

LENGTHS = [256, 512, 1024, 2048]  # 4096 would take a round of about a minute
REPEATS = 5


def forward_backward(attend, q, k, v, grad, causal):
    """One training step's attention: the output, then dQ, dK, dV from dO = grad."""
    with torch.inference_mode(False), torch.enable_grad():  # interleaved_times times in inference mode
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        return torch.autograd.grad(attend(q, k, v, causal), (q, k, v), grad)


def main() -> None:
    where, rows = sweep(LENGTHS, 4, lambda attend: partial(forward_backward, attend), REPEATS, backward=True)
    save_result({"machine": where, "conditions": CONDITIONS, "heads": HEADS, "head_dim": HEAD_DIM,
                 "repeats": REPEATS, "measures": "forward + backward (dQ, dK, dV), fp32, B = 1", "rows": rows},
                "efficient_attention_backward_cpu", "src/attention_book/data")


if __name__ == "__main__":
    main()
