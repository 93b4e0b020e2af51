"""Chapters 3 and 4's trained models: a two-head look-back layer and a tiny encoder–decoder that reverses.

Each is trained from a fixed seed on fixed batches (`attention_book.trained`), then measured on a fixed
evaluation batch. The weights go to src/attention_book/data/trained_lookback.pt and trained_reverser.pt
(plain state_dicts, loaded with weights_only=True); the settings, loss curves, accuracies and the machine
go to src/attention_book/data/trained_small.json, which the chapters read.
Run from the repository root:  .venv/bin/python scripts/train_small_models.py
With the argument `heads` it runs only chapter 3's one-head experiment instead: the look-back model with
H = 1 head of width 32 (same E, data, seed and Adam settings as the stored two-head one), trained for 3,000
steps and measured after 300, 1,000, 2,000 and 3,000, written to src/attention_book/data/lookback_heads.json.
(About 3 s each, 8 s for the whole script, on a quiet 2-core machine, where a rerun reproduced the stored
weights bit for bit. The seconds in the JSON files are wall-clock times of the stored runs on a shared machine
and measure its load, not the models: trained_small.json's `train_seconds` is the whole 300-step training of
each model (126 s and 314 s at a load average of 17); lookback_heads.json's `seconds` are the time from the
start of the one-head run to each measurement, evaluations included, at another load (6.4 s at step 300 but
60.9 s at step 1,000). A rerun of the 300 steps at a load average of 12 took 73 s. Neither is the cost of the
model, and the book quotes neither; the accuracies do not depend on the load.)
"""

import dataclasses
import json
import sys
from pathlib import Path
from time import perf_counter

import torch

from attention_book.measure import machine
from attention_book.trained import (
    LookBackConfig,
    ReverserConfig,
    TrainSettings,
    config_dict,
    lookback_accuracy,
    reverser_accuracy,
    train_lookback,
    train_reverser,
)

DATA = Path("src/attention_book/data")


def main() -> None:
    torch.set_num_threads(2)  # the book's reference machine; the result does not depend on it
    settings = TrainSettings()
    result = {"machine": machine(), "settings": config_dict(settings)}
    for name, config, train, accuracy in (("lookback", LookBackConfig(), train_lookback, lookback_accuracy),
                                          ("reverser", ReverserConfig(), train_reverser, reverser_accuracy)):
        start = perf_counter()
        model, curve = train(config, settings)
        seconds = perf_counter() - start
        weights = f"trained_{name}.pt"
        torch.save(model.state_dict(), DATA / weights)
        scores = accuracy(model)
        result[name] = {"config": config_dict(config), "weights": weights, "curve": curve, "accuracy": scores,
                        "train_seconds": round(seconds, 1)}
        print(f"{name}: {seconds:.0f} s, final loss {curve[-1][1]:.4f}, accuracy {scores}")
    (DATA / "trained_small.json").write_text(json.dumps(result, indent=1) + "\n")


def heads_experiment() -> None:
    """Chapter 3: does the look-back task need two heads? One head, measured on the way to 3,000 steps; the
    two-head model is the stored one (300 steps)."""
    torch.set_num_threads(2)
    config = dataclasses.replace(LookBackConfig(), num_heads=1)
    settings = dataclasses.replace(TrainSettings(), steps=3000)
    runs, start = [], perf_counter()

    def measure(steps: int, model) -> None:
        if steps in (300, 1000, 2000, 3000):
            model.eval()
            runs.append({"num_heads": 1, "steps": steps, "accuracy": lookback_accuracy(model),
                         "seconds": round(perf_counter() - start, 1)})
            model.train()
            print(runs[-1], flush=True)

    train_lookback(config, settings, after_step=measure)
    result = {"machine": machine(), "settings": config_dict(settings), "config": config_dict(config), "runs": runs}
    (DATA / "lookback_heads.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["heads"]:
        heads_experiment()
    else:
        main()
