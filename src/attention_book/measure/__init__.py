"""Measurement of the teaching code from outside it: time, peak memory and FLOP counts (chapters 3, 7, 8, 9).

Nothing in the chapters' modules times or measures itself; these functions wrap them. Peak memory lives
in `attention_book.measure.memory`, which also runs as a command in a fresh process.
"""

from .benchmark import (bandwidth_fit, interleaved_medians, interleaved_times, load_average, load_result,
                        machine, measure_generation, rate_spread, round_ratios, save_result, spread, time_steps)
from .flops import attention_tflops

__all__ = ["attention_tflops", "bandwidth_fit", "interleaved_medians", "interleaved_times", "load_average", "load_result",
           "machine", "measure_generation", "rate_spread", "round_ratios", "save_result", "spread", "time_steps"]
