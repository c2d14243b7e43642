"""Character-level text for the language-model examples: a deterministic corpus made of Python's
own standard-library sources, a fixed vocabulary, and batching of training windows.

The vocabulary is fixed (newline plus printable ASCII) rather than read off the corpus, so a
model's shapes do not depend on which Python installation supplied the text.
"""

from __future__ import annotations

import glob
import os

import time

import numpy as np

VOCABULARY = "\n" + "".join(chr(code) for code in range(32, 127))
# Characters outside the vocabulary (tabs, non-ASCII letters in docstrings) become this one.
_REPLACEMENT = "?"


class CharVocabulary:
    """Maps characters to integer ids and back, over the fixed VOCABULARY."""

    def __init__(self, characters: str = VOCABULARY):
        self.characters = characters
        self._index = {character: i for i, character in enumerate(characters)}
        self._replacement_id = self._index[_REPLACEMENT]
        # A lookup table from code point to id makes encoding a whole corpus one NumPy gather.
        self._table = np.full(0x110000, self._replacement_id, dtype=np.int32)
        for character, i in self._index.items():
            self._table[ord(character)] = i

    @property
    def size(self) -> int:
        """The number of distinct ids."""
        return len(self.characters)

    def encode(self, text: str) -> np.ndarray:
        """The int32 ids of `text`, with unknown characters mapped to '?'."""
        code_points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        return self._table[code_points]

    def decode(self, ids) -> str:
        """The text whose ids are `ids` (any integer sequence or array)."""
        return "".join(self.characters[int(i)] for i in np.asarray(ids).reshape(-1))


def standard_library_files(num_files: int) -> list[str]:
    """The first `num_files` .py files, sorted by path, of the directory holding the os module."""
    directory = os.path.dirname(os.__file__)
    return sorted(glob.glob(os.path.join(directory, "*.py")))[:num_files]


def load_corpus(num_files: int = 20, max_chars: int | None = 200_000) -> str:
    """The concatenated text of the first `num_files` standard-library sources, cut to max_chars.

    Args:
      num_files: how many files of the sorted listing to read.
      max_chars: the most characters to keep (None keeps all).
    Returns:
      The text, with the files joined in listing order.
    """
    parts = []
    total = 0
    for path in standard_library_files(num_files):
        with open(path, encoding="utf-8", errors="replace") as handle:
            parts.append(handle.read())
        total += len(parts[-1])
        if max_chars is not None and total >= max_chars:
            break
    text = "".join(parts)
    return text if max_chars is None else text[:max_chars]


def random_windows(
    data: np.ndarray, batch_size: int, length: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """A batch of random windows: inputs data[s:s+length] and targets data[s+1:s+length+1].

    Returns:
      (inputs, targets), each int32 of shape (batch_size, length).
    """
    starts = rng.integers(0, len(data) - length - 1, size=batch_size)
    offsets = starts[:, None] + np.arange(length + 1)[None, :]
    windows = data[offsets]
    return windows[:, :-1], windows[:, 1:]


class SequentialWindows:
    """Consecutive windows over `batch_size` parallel streams, for truncated backpropagation.

    The data is cut into `batch_size` equal streams; window k of stream b follows window k-1 of
    the same stream, so a recurrent state carried between windows sees continuous text.
    """

    def __init__(self, data: np.ndarray, batch_size: int, length: int):
        stream_length = (len(data) - 1) // batch_size
        if stream_length < length + 1:
            raise ValueError(
                f"the corpus ({len(data)} characters) is too short for {batch_size} "
                f"streams of windows of length {length}; load more text or reduce "
                "batch_size or the sequence length."
            )
        self.inputs = data[: batch_size * stream_length].reshape(batch_size, stream_length)
        self.targets = data[1 : batch_size * stream_length + 1].reshape(batch_size, stream_length)
        self.length = length
        self.windows_per_pass = stream_length // length
        self._position = 0

    def next(self) -> tuple[np.ndarray, np.ndarray, bool]:
        """The next (inputs, targets, starts_pass): starts_pass says the state should be reset."""
        starts_pass = self._position == 0
        begin = self._position * self.length
        window = slice(begin, begin + self.length)
        self._position = (self._position + 1) % self.windows_per_pass
        return self.inputs[:, window], self.targets[:, window], starts_pass


class TrainingLog:
    """The progress of a text model's training: the mean loss of every `log_every` steps, and a
    sample of generated text at the end of each interval (printed when `verbose`).

    `generate(params, key)` returns the sampled text; `prompt` is printed before it."""

    def __init__(self, steps: int, log_every: int, generate, prompt: str, key, verbose: bool):
        self.steps, self.log_every = steps, log_every
        self.generate, self.prompt, self.key, self.verbose = generate, prompt, key, verbose
        self.losses: list[tuple[int, float]] = []
        self.samples: list[tuple[int, str]] = []
        self._pending: list = []
        self._start = time.perf_counter()

    def step(self, i: int, loss, params) -> None:
        """Record step i's loss (an array, read only at the end of an interval); `params` is a
        function giving the current parameters, called only when a sample is drawn."""
        from kiln import random

        self._pending.append(loss)
        if (i + 1) % self.log_every and i + 1 != self.steps:
            return
        mean_loss = float(np.mean([float(value) for value in self._pending]))
        self._pending = []
        self.losses.append((i + 1, mean_loss))
        self.key, this_key = random.split(self.key)
        text = self.generate(params(), this_key)
        self.samples.append((i + 1, text))
        if self.verbose:
            elapsed = time.perf_counter() - self._start
            print(f"step {i + 1:5d}  loss {mean_loss:.4f}  ({elapsed:.1f} s)")
            print("  | " + (self.prompt + text).replace("\n", "\n  | "))
