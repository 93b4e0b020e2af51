"""Chapter 11's training run: the attention-only transformer on repeated random tokens, three ways.

Learned absolute positions, rotary positions (RoPE) and no positions at all, each trained from the same
seed on the same batches, then measured on a fixed evaluation batch. The weights go to
src/attention_book/data/induction_<positions>.pt (plain state_dicts, loaded with weights_only=True) and the
loss curves and metrics, with the machine, to src/attention_book/data/induction.json, which chapter 11 reads.
Run from the repository root (about 70 s on 2 CPU cores):  .venv/bin/python scripts/train_induction.py
With --measure-only it trains nothing: it measures the stored weights again with today's `evaluate` and
rewrites only the metrics in induction.json (the weights, curves and times stay as they are).
"""

import argparse
import json
from pathlib import Path
from time import perf_counter

import torch

from attention_book.induction import (
    InductionConfig,
    TrainConfig,
    config_dict,
    evaluate,
    evaluation_batch,
    load_trained,
    train,
)
from attention_book.measure import machine

DATA = Path("src/attention_book/data")
KINDS = ("learned", "rope", "none")  # scripts/train_length.py trains the other position kinds


def measure_only() -> None:
    """Re-measure the stored models' metrics; weights, curves and training times are left as stored."""
    stored = json.loads((DATA / "induction.json").read_text())
    for positions in KINDS:
        model, _ = load_trained(positions)
        stored["variants"][positions]["metrics"] = evaluate(model, *evaluation_batch(model.config))
    (DATA / "induction.json").write_text(json.dumps(stored, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure-only", action="store_true", help="re-measure the stored weights, train nothing")
    if parser.parse_args().measure_only:
        return measure_only()
    train_config = TrainConfig()
    result = {"machine": machine(), "train": config_dict(train_config), "variants": {}}
    for positions in KINDS:
        config = InductionConfig(positions=positions)
        start = perf_counter()
        model, curve = train(config, train_config)
        seconds = perf_counter() - start
        weights = f"induction_{positions}.pt"
        torch.save(model.state_dict(), DATA / weights)
        metrics = evaluate(model, *evaluation_batch(config))
        result["variants"][positions] = {"config": config_dict(config), "weights": weights, "curve": curve,
                                         "metrics": metrics, "train_seconds": round(seconds, 1)}
        print(f"{positions:8}: loss {metrics['loss_first_half']:.2f} on the first half, "
              f"{metrics['loss_repeated_half']:.2f} on the repeated half")
    (DATA / "induction.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
