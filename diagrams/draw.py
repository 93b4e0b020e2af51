"""Explanatory diagrams for chapters 1-12 of "Attention from scratch", drawn with matplotlib.

Writes one SVG per diagram into chapters/figures/:

    encoder_bottleneck.svg           (introduction) an RNN encoder–decoder's one context vector, and attention
    soft_alignment.svg               (introduction) a trained decoder's cross-attention weights (chapter 4's model)
    embedding_lookup.svg             (chapter 1)  sentence -> tokens -> ids -> rows of nn.Embedding(6, 16) -> X
    one_query_walk.svg               (chapter 2)  one query against six keys: scores, softmax, weighted sum
    scaled_dot_product_attention.svg (chapter 2)  X -> Q, K, V -> scores -> softmax -> weights @ V, every shape
    multihead_split_merge.svg        (chapter 3)  one E-wide projection, split_heads, H attentions, merge_heads, W^O
    cross_attention.svg              (chapter 4)  queries from the sentence (T = 6), keys and values from 8 other tokens
    causal_mask_alignments.svg       (chapter 5)  is_causal=True (top-left) against causal_mask(T, S) (bottom-right)
    keras_decoder_flow.svg           (chapter 6)  the Keras decoder's data flow, with the saved weights' h5 names
    kv_cache_decode_step.svg         (chapter 7)  one decode step: what is computed, what is read from the cache
    tile_schedule.svg                (chapter 9)  which tiles tiled attention computes fully, masks or skips
    memory_hierarchy.svg             (chapter 9)  a GPU's SRAM and HBM, and what naive and tiled attention move
    split_kv.svg                     (chapter 9)  split-KV decoding: chunks of the cache, partials, one exact merge
    rope_rotation.svg                (chapter 10)  RoPE turns a q/k feature pair by its position; the angle sees m − n
    induction_circuit.svg            (chapter 11)  a previous-token head and an induction head copy the token after A
    k_composition_ablation.svg       (chapter 11)  the path ablation: head 3's output taken out of layer 2's keys only
    transformer_block.svg            (chapter 3)  where multi-head attention sits in a transformer block
    encoder_decoder.svg              (chapter 4)  an encoder-decoder: the encoder's keys and values serve every step
    latent_attention.svg             (chapter 8)  multi-head latent attention at a decode step, absorbed form
    gpt_stack.svg                    (chapter 12) the GPT chapter 12 assembles, one Block opened, every shape

Each chapter's drawings live in a module of their own, diagrams/ch01.py ... ch11.py, beside the shared
primitives (diagrams/primitives.py: palette, boxes, arrows, the layout check, deterministic saving);
this script lists them all and draws them.

Run from the repository root:

    .venv/bin/python diagrams/draw.py                        # the SVGs only
    .venv/bin/python diagrams/draw.py --png-dir /tmp/diagrams  # and a PNG copy of each, to look at

Then every chapter notebook that shows a diagram as `attachment:name.svg` (issue 40: Colab loads no
relative path) gets the new SVG in its cell's attachments, so the notebook alone shows every diagram;
tests/test_diagrams.py checks they are byte-identical to chapters/figures.

The SVGs are byte-for-byte the same on every run (fixed hash salt, no date, no randomness), so a diff
shows only real changes. Every diagram is drawn on an axes that fills the figure with one data unit per
inch, so positions and sizes below are in inches. Before saving, `check_layout` fails if any text leaves
the figure or overlaps other text.
"""

import argparse
import sys
from pathlib import Path

import nbformat

from ch01 import embedding_lookup
from ch02 import one_query_walk, scaled_dot_product_attention
from ch03 import multihead_split_merge, transformer_block
from ch04 import cross_attention, encoder_decoder
from ch05 import causal_mask_alignments
from ch06 import keras_decoder_flow
from ch07 import kv_cache_decode_step
from ch08 import block_table, grouped_query_heads, latent_attention, ring_buffer
from ch09 import memory_hierarchy, split_kv, tile_schedule
from ch10 import rope_rotation
from ch11 import induction_circuit, k_composition_ablation
from ch12 import gpt_stack
from intro import encoder_bottleneck, soft_alignment
from primitives import FIGURES, plt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # the package, also when not installed
from attention_book.notebook_form import attach_figures  # noqa: E402

DIAGRAMS = (encoder_bottleneck, soft_alignment, embedding_lookup, one_query_walk, scaled_dot_product_attention, multihead_split_merge, cross_attention, causal_mask_alignments, keras_decoder_flow, kv_cache_decode_step, grouped_query_heads, ring_buffer, block_table, tile_schedule, memory_hierarchy, split_kv, rope_rotation, induction_circuit, k_composition_ablation, transformer_block, encoder_decoder, latent_attention, gpt_stack)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--png-dir", type=Path, help="also write a PNG copy of each diagram here (not the repo)")
    parser.add_argument("--out", type=Path, default=FIGURES, help="where the SVGs go (default: chapters/figures)")
    parser.add_argument("names", nargs="*", help="draw only these diagrams (default: all)")
    args = parser.parse_args()
    plt.rcParams["savefig.directory"] = str(args.out)
    for draw in DIAGRAMS:
        if not args.names or draw.__name__ in args.names:
            draw(args.png_dir)
            print(f"wrote {args.out / draw.__name__}.svg")
    if args.out.resolve() == FIGURES.resolve():
        sync_attachments(FIGURES.parent)


def sync_attachments(chapters: Path) -> None:
    """Refresh the diagrams attached to the chapter notebooks' markdown cells from chapters/figures."""
    for path in sorted(chapters.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        if attach_figures(notebook, chapters / "figures"):
            nbformat.write(notebook, path)
            print(f"updated the diagrams attached to {path}")


if __name__ == "__main__":
    main()
