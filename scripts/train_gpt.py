"""Chapter 12's training run: a small GPT (chapter 7's `Decoder`) on the characters of Python's own docs.

The corpus is the paragraphs of `pydoc_data.topics` that Python 3.10 to 3.13 share, found by the
fingerprints in src/attention_book/data/gpt_corpus.json (the text itself is never stored). Writes the
weights to src/attention_book/data/gpt_weights.pt (a plain state_dict, loaded with weights_only=True) and
the curves, vocabulary, settings, machine and training time to src/attention_book/data/gpt.json, which
chapter 12 reads. The recipe writes some rows of each batch as a real passage repeated
(`GPTTrainConfig.repeat_fraction`); the same run without them (repeat_fraction 0) trains beside it, in a
second process; its curves and time are stored ("without_repeats") and its weights in
src/attention_book/data/gpt_weights_plain.pt, so the chapter can print what the repeats cost and
measure that model's heads. Deterministic: a rerun on the same machine writes the same weights and curves, bit for
bit (tests/test_gpt.py checks it on a short run).

Run from the repository root (two processes of one thread each, 5 to 20 minutes on a loaded 2-core CPU):  .venv/bin/python scripts/train_gpt.py
`--corpus PYTHON [PYTHON ...]` instead rewrites gpt_corpus.json from the interpreters given (paths to
python3.10 ... python3.13); it trains nothing. `--plain-only` trains only the run without repeats
(one process) and rewrites its weights and its "without_repeats" entry of gpt.json, nothing else.
"""

import argparse
import dataclasses
import hashlib
import json
import multiprocessing
import subprocess
import sys
from pathlib import Path
from time import perf_counter

import torch

from attention_book.gpt import (
    CORPUS_FILE,
    RESULT_FILE,
    PLAIN_WEIGHTS_FILE,
    WEIGHTS_FILE,
    GPTTrainConfig,
    bits,
    config_dict,
    corpus_text,
    shared_fingerprints,
    topic_paragraphs,
    train,
    vocabulary,
)
from attention_book.measure import machine

DATA = Path("src/attention_book/data")
# One thread, fixed: a rerun on the same machine then splits every matrix product the same way. And on a
# shared 2-core machine two threads of one process wait for each other whenever the other is descheduled:
# under a load of 11, a training step took 0.31 s with one thread and 4.8 s with two.
THREADS = 1


def write_corpus(pythons: list[str]) -> None:
    """gpt_corpus.json from the topics of each interpreter: fingerprints, versions and the text's SHA-256."""
    versions, names = [], []
    for python in pythons:
        dump = "import json, sys; from pydoc_data.topics import topics; print(json.dumps([sys.version, topics]))"
        version, topics = json.loads(subprocess.run([python, "-c", dump], check=True, capture_output=True,
                                                    text=True).stdout)
        versions.append(topics)
        names.append(version.split()[0])
    fingerprints = shared_fingerprints(versions)
    by_print = {}
    for p in topic_paragraphs(versions[0]):
        by_print.setdefault(hashlib.sha256(p.encode()).hexdigest()[:16], p)
    text = "\n\n".join(by_print[f] for f in fingerprints)
    stored = {"pythons": names, "sha256": hashlib.sha256(text.encode()).hexdigest(), "characters": len(text),
              "fingerprints": fingerprints}
    (DATA / CORPUS_FILE).write_text(json.dumps(stored, indent=0) + "\n")
    print(f"{len(fingerprints)} shared paragraphs, {len(text)} characters")


def run(config: GPTTrainConfig) -> tuple[dict, dict, float, int]:
    """One training run in this process, on one thread: (weights, curves, seconds, parameters)."""
    torch.set_num_threads(THREADS)
    text = corpus_text()
    name = "recipe" if config.repeat_fraction else "without repeats"

    def report(step, train_loss, validation_loss):
        print(f"{name:15} step {step:5}: train {bits(train_loss):.3f}, "
              f"validation {bits(validation_loss):.3f} bits/char", flush=True)

    start = perf_counter()
    model, curves = train(text, config, report)
    seconds = perf_counter() - start
    return model.state_dict(), curves, seconds, sum(p.numel() for p in model.parameters())  # tied: once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", nargs="+", metavar="PYTHON", help="rewrite gpt_corpus.json, train nothing")
    parser.add_argument("--steps", type=int, help="fewer steps, for a quick try (the stored run uses the default)")
    parser.add_argument("--plain-only", action="store_true",
                        help="train only the run without repeats; rewrite its weights and gpt.json entry")
    args = parser.parse_args()
    if args.corpus:
        return write_corpus(args.corpus)
    config = GPTTrainConfig() if args.steps is None else GPTTrainConfig(steps=args.steps)
    plain = dataclasses.replace(config, repeat_fraction=0.0)  # the same run, no repeated passages
    if args.plain_only:
        plain_weights, plain_curves, plain_seconds, _ = run(plain)
        torch.save(plain_weights, DATA / PLAIN_WEIGHTS_FILE)
        result = json.loads((DATA / RESULT_FILE).read_text())
        # the stored time stays the paired run's (measured beside the recipe, as the chapter compares them)
        result["without_repeats"] |= {"train": config_dict(plain), "curves": plain_curves}
        (DATA / RESULT_FILE).write_text(json.dumps(result, indent=1) + "\n")
        return print(f"{plain_seconds:.0f} s without repeats (stored time unchanged)")
    with multiprocessing.get_context("spawn").Pool(2) as pool:  # each run in its own one-thread process
        (weights, curves, seconds, parameters), (plain_weights, plain_curves, plain_seconds, _) = pool.map(
            run, [config, plain])
    torch.save(weights, DATA / WEIGHTS_FILE)
    torch.save(plain_weights, DATA / PLAIN_WEIGHTS_FILE)
    text = corpus_text()
    result = {"machine": machine() | {"threads": THREADS, "note": "measured on a shared machine under load "
                                      "from other jobs, the two runs in parallel processes"},
              "python": sys.version.split()[0], "train": config_dict(config), "vocabulary": vocabulary(text),
              "parameters": parameters, "curves": curves,
              "train_seconds": round(seconds, 1),
              "without_repeats": {"train": config_dict(plain), "curves": plain_curves,
                                  "train_seconds": round(plain_seconds, 1)}}
    (DATA / RESULT_FILE).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{seconds:.0f} s with repeats, {plain_seconds:.0f} s without")


if __name__ == "__main__":
    main()
