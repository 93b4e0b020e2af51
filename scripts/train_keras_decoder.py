"""Chapter 6's training run: the Keras decoder on 今天天气真好, stored in the package for chapters 6 and 7.

Trains `keras_decoder.train_keras_decoder` (seed 42) with the pinned versions of requirements.txt and saves
its weights, a Keras 3 `.weights.h5` file, to src/attention_book/data/keras_decoder.weights.h5, which
`keras_decoder.load_trained_weights` reads. Other TensorFlow and Keras versions initialise and train to
other, equivalent weights; the chapters compute from these so that what they print does not depend on it.
Run from the repository root (seconds):  .venv/bin/python scripts/train_keras_decoder.py
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402

from attention_book import keras_decoder as kd  # noqa: E402


def main() -> None:
    tokens = np.array(kd.SENTENCE_TOKENS)
    inputs, targets = tokens[None, :-1], tokens[None, 1:]  # (B, T) = (1, 5): teacher forcing
    model, losses = kd.train_keras_decoder(inputs, targets)
    assert losses[-1] < kd.TRAINED_FINAL_LOSS_BELOW, f"final loss {losses[-1]:.4f}"
    predicted = model.predict(inputs, verbose=0).argmax(-1)  # (B, T)
    assert (predicted == targets).all(), predicted
    path = str(kd.trained_weights_path())
    model.save_weights(path)
    np.testing.assert_array_equal(kd.decoder_forward(kd.load_trained_weights(), inputs).argmax(-1), targets)
    print(f"final loss {losses[-1]:.4f}; weights in {path}")


if __name__ == "__main__":
    main()
