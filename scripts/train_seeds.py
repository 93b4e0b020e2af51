"""Chapter 11's measurements over several seeds, a one-layer control, and a start token without positions.

The stored models of scripts/train_induction.py and scripts/train_length.py are one seed each (seed 0).
This script trains, with the same settings (`TrainConfig`, only the seed changes):
- every position scheme (learned, sinusoidal, RoPE, ALiBi, none) with seeds 1 and 2, measured at
  T = 32, 64 and 128 as train_length.py measures seed 0 (whose numbers it copies from the stored records);
- the learned-positions model of seed 0 again, with the heads' scores measured during training (`probe`),
  and the same with one layer (seeds 0, 1, 2): Olsson et al.'s phase change, and its absence in one layer;
- the model without positions but with a learned start-of-sequence vector (`start_token`), seeds 0, 1, 2
  (Kazemnejad et al., 2023: a causal model can recover positions from a start token).
It stores metrics and curves, no weights, in src/attention_book/data/induction_seeds.json. Run from the
repository root, each run on one thread (17 runs of 20 to 30 s of CPU each on a quiet machine);
--processes N runs N of them at once, with the same results:
    OMP_NUM_THREADS=1 .venv/bin/python scripts/train_seeds.py --processes 4
"""

import argparse
import json
import multiprocessing
import resource
from dataclasses import replace
from pathlib import Path
from time import perf_counter

import torch
from tqdm import tqdm

from attention_book.induction import (
    InductionConfig,
    TrainConfig,
    config_dict,
    evaluate,
    evaluate_length,
    evaluation_batch,
    load_length_record,
    load_trained,
    train,
)
from attention_book.measure import machine

DATA = Path("src/attention_book/data")
KINDS = ("learned", "sinusoidal", "rope", "alibi", "none")
NEW_SEEDS = (1, 2)
LENGTHS = (32, 64, 128)


def summary(model, config) -> dict:
    """What the chapter's tables read: losses, the best head scores per layer, ablations, and lengths."""
    metrics = evaluate(model, *evaluation_batch(config))
    lengths = {str(n): evaluate_length(model, n) for n in LENGTHS[1:]}
    for found in lengths.values():
        found.pop("repeated_loss_per_position", None)
    return {"metrics": metrics, "length": lengths}


def stored_seed_0(kind: str, length_record: dict) -> dict:
    """Seed 0's numbers, from the stored models (trained by the other two scripts)."""
    model, _ = load_trained(kind)
    lengths = {}
    for n in LENGTHS[1:]:
        found = dict(length_record["length"][kind][str(n)])
        found.pop("repeated_loss_per_position", None)
        lengths[str(n)] = found
    return {"metrics": evaluate(model, *evaluation_batch(model.config)), "length": lengths}


def run_one(group: str, what, seed: int) -> tuple[dict, float]:
    """One training run of `runs` on one thread: its stored entry and the CPU seconds it used."""
    torch.set_num_threads(1)
    began_cpu = resource.getrusage(resource.RUSAGE_SELF)
    settings = replace(TrainConfig(), seed=seed)
    if group == "seeds":
        config = InductionConfig(positions=what)
    elif group == "probed":
        config = InductionConfig(positions="learned", num_layers=what)
    else:
        config = InductionConfig(positions="none", start_token=True)
    began = perf_counter()
    model, curve = train(config, settings, probe=group == "probed")
    seconds = round(perf_counter() - began, 1)
    if group == "seeds":
        entry = summary(model, config)
    elif group == "probed":
        entry = {"config": config_dict(config), "curve": curve, "train_seconds": seconds,
                 "metrics": evaluate(model, *evaluation_batch(config))}
    else:
        entry = summary(model, config)
        entry["config"], entry["train_seconds"] = config_dict(config), seconds
    used = resource.getrusage(resource.RUSAGE_SELF)
    return entry, used.ru_utime + used.ru_stime - began_cpu.ru_utime - began_cpu.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=1,
                        help="runs in parallel, each on one thread (the results do not depend on it)")
    processes = parser.parse_args().processes
    torch.set_num_threads(1)
    start_cpu = resource.getrusage(resource.RUSAGE_SELF)
    train_config = TrainConfig()
    length_record = load_length_record()
    result = {"machine": machine(), "train": config_dict(train_config), "seeds": {}, "probed": {},
              "start_token": {}}
    runs = ([("seeds", kind, seed) for kind in KINDS for seed in NEW_SEEDS]
            + [("probed", layers, seed) for layers, seed in ((2, 0), (1, 0), (1, 1), (1, 2))]
            + [("start_token", "none", seed) for seed in (0, 1, 2)])
    for kind in KINDS:
        result["seeds"][kind] = {"0": stored_seed_0(kind, length_record)}
    longest_first = sorted(runs, key=lambda run: run[0] == "seeds")  # probed and start-token runs take longer
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        done = list(tqdm(pool.imap(run_one_star, longest_first), total=len(runs), desc="training runs"))
    for (group, what, seed), (entry, _) in zip(longest_first, done, strict=True):
        if group == "seeds":
            result["seeds"][what][str(seed)] = entry
        elif group == "probed":
            result["probed"].setdefault(f"{what}-layer", {})[str(seed)] = entry
        else:
            result["start_token"][str(seed)] = entry
    used = resource.getrusage(resource.RUSAGE_SELF)
    own = used.ru_utime + used.ru_stime - start_cpu.ru_utime - start_cpu.ru_stime
    result["total_cpu_seconds"] = round(own + sum(cpu for _, cpu in done), 1)
    result["processes"] = processes
    (DATA / "induction_seeds.json").write_text(json.dumps(result, indent=1) + "\n")
    print("stored", DATA / "induction_seeds.json", f"({result['total_cpu_seconds']:.0f} s of CPU)")


def run_one_star(run: tuple) -> tuple[dict, float]:
    """`run_one` for Pool.imap, which passes one argument."""
    return run_one(*run)


if __name__ == "__main__":
    main()
