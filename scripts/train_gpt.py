"""Chapter 12's training run: a small GPT (chapter 7's `Decoder`) on the characters of Python's own docs.

The corpus is the paragraphs of `pydoc_data.topics` that Python 3.10 to 3.13 share, found by the
fingerprints in src/attention_book/data/gpt_corpus.json (the text itself is never stored). Writes the
weights to src/attention_book/data/gpt_weights.pt (a plain state_dict, loaded with weights_only=True) and
the curves, vocabulary, settings, machine and training time to src/attention_book/data/gpt.json, which
chapter 12 reads. Deterministic: a rerun on the same machine writes the same weights and curves, bit for
bit (tests/test_gpt.py checks it on a short run).

Run from the repository root (about 20 minutes on one thread of a loaded 2-core CPU):  .venv/bin/python scripts/train_gpt.py
`--corpus PYTHON [PYTHON ...]` instead rewrites gpt_corpus.json from the interpreters given (paths to
python3.10 ... python3.13); it trains nothing.
"""

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from time import perf_counter

import torch

from attention_book.gpt import (
    CORPUS_FILE,
    RESULT_FILE,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", nargs="+", metavar="PYTHON", help="rewrite gpt_corpus.json, train nothing")
    parser.add_argument("--steps", type=int, help="fewer steps, for a quick try (the stored run uses the default)")
    args = parser.parse_args()
    if args.corpus:
        return write_corpus(args.corpus)
    torch.set_num_threads(THREADS)
    config = GPTTrainConfig() if args.steps is None else GPTTrainConfig(steps=args.steps)
    text = corpus_text()

    def report(step, train_loss, validation_loss):
        print(f"step {step:5}: train {bits(train_loss):.3f}, validation {bits(validation_loss):.3f} bits/char",
              flush=True)

    start = perf_counter()
    model, curves = train(text, config, report)
    seconds = perf_counter() - start
    torch.save(model.state_dict(), DATA / WEIGHTS_FILE)
    result = {"machine": machine() | {"note": "measured on a shared machine under load from other jobs"},
              "python": sys.version.split()[0], "train": config_dict(config), "vocabulary": vocabulary(text),
              "parameters": sum(p.numel() for p in model.parameters()), "curves": curves,
              "train_seconds": round(seconds, 1)}
    (DATA / RESULT_FILE).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{seconds:.0f} s")


if __name__ == "__main__":
    main()
