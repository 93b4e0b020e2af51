"""Chapter 11's length-generalisation run: two more position schemes, and every scheme on longer sequences.

Trains the attention-only model with sinusoidal positions and with ALiBi, from the same seed, on the same
batches and with the same settings as scripts/train_induction.py (whose three stored models, learned,
RoPE and none, are loaded, not retrained). Then runs all five on the evaluation batch made 2 and 4 times
the trained length (T = 32, 64, 128: the same periods, repeated further) and stores loss, induction score
and the loss per position. Weights: src/attention_book/data/induction_<positions>.pt; record:
src/attention_book/data/induction_length.json, with each training run's wall-clock and CPU seconds. Run
from the repository root (about 45 s of CPU for the training, 2 minutes in all, on one thread):
    OMP_NUM_THREADS=1 .venv/bin/python scripts/train_length.py
On a machine shared with other work, one thread wastes no CPU time waiting for the other.
With --measure-only it trains nothing: it measures the stored weights again with today's `evaluate` and
`evaluate_length` and rewrites only those numbers (the weights, curves and times stay as they are).
"""

import argparse
import json
import resource
from pathlib import Path
from time import perf_counter

import torch

from attention_book.induction import (
    InductionConfig,
    TrainConfig,
    config_dict,
    evaluate,
    evaluate_length,
    evaluation_batch,
    load_trained,
    train,
)
from attention_book.measure import machine

DATA = Path("src/attention_book/data")
NEW_KINDS = ("sinusoidal", "alibi")
ALL_KINDS = ("learned", "sinusoidal", "rope", "alibi", "none")
LENGTH_FACTORS = (1, 2, 4)


def cpu_seconds() -> float:
    """User + system CPU time of this process so far: what the run costs on a shared machine."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure_only() -> None:
    """Re-measure the stored models; weights, curves and training times are left as stored."""
    stored = json.loads((DATA / "induction_length.json").read_text())
    for positions in ALL_KINDS:
        model, _ = load_trained(positions)
        if positions in stored["variants"]:
            stored["variants"][positions]["metrics"] = evaluate(model, *evaluation_batch(model.config))
        trained = 2 * model.config.half_length
        stored["length"][positions] = {str(f * trained): evaluate_length(model, f * trained)
                                       for f in LENGTH_FACTORS}
    (DATA / "induction_length.json").write_text(json.dumps(stored, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure-only", action="store_true", help="re-measure the stored weights, train nothing")
    if parser.parse_args().measure_only:
        return measure_only()
    train_config = TrainConfig()
    result = {"machine": machine(), "train": config_dict(train_config), "variants": {}, "length": {}}
    models = {}
    for positions in NEW_KINDS:
        config = InductionConfig(positions=positions)
        start, cpu = perf_counter(), cpu_seconds()
        model, curve = train(config, train_config)
        seconds, cpu = perf_counter() - start, cpu_seconds() - cpu
        weights = f"induction_{positions}.pt"
        torch.save(model.state_dict(), DATA / weights)
        metrics = evaluate(model, *evaluation_batch(config))
        result["variants"][positions] = {"config": config_dict(config), "weights": weights, "curve": curve,
                                         "metrics": metrics, "train_seconds": round(seconds, 1),
                                         "train_cpu_seconds": round(cpu, 1)}
        models[positions] = model
        print(f"{positions:10}: loss {metrics['loss_first_half']:.2f} on the first half, "
              f"{metrics['loss_repeated_half']:.2f} on the repeated half ({seconds:.0f} s, {cpu:.0f} s CPU)")
    for positions in ALL_KINDS:
        model = models[positions] if positions in models else load_trained(positions)[0]
        trained = 2 * model.config.half_length
        result["length"][positions] = {str(f * trained): evaluate_length(model, f * trained)
                                       for f in LENGTH_FACTORS}
        print(positions, {length: r.get("loss_repeated_half", "error")
                          for length, r in result["length"][positions].items()})
    result["total_cpu_seconds"] = round(cpu_seconds(), 1)
    (DATA / "induction_length.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
