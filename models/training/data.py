"""Training data: a text file, tokenised once, split 90 % / 10 %, served as random contiguous blocks.

The default corpus is Tiny Shakespeare, shipped with the package (see
models/corpus/README.md), so the main job runs offline.
"""
from pathlib import Path

import numpy as np

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "tinyshakespeare.txt"


def load_text(path=None):
    """The text of `path` (the shipped Shakespeare when None), with a one-line error when it is missing."""
    path = Path(path) if path is not None else DEFAULT_CORPUS
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path} (pass --data PATH to a UTF-8 text file)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"data file {path} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                         f"{exc.start}); convert it first, e.g. `iconv -t utf-8`") from None
    if not text:
        raise ValueError(f"data file {path} is empty")
    return text


class TokenData:
    """Token ids split into a training part (the first 90 %) and a validation part (the rest)."""

    def __init__(self, ids, val_fraction=0.1):
        ids = np.asarray(ids, dtype=np.int64)
        cut = int(len(ids) * (1 - val_fraction))
        self.splits = {"train": ids[:cut], "val": ids[cut:]}

    def check_fits(self, block_size, splits=("train", "val")):
        """A one-line error unless each split holds more than `block_size` tokens (a block and its target)."""
        for split in splits:
            data = self.splits[split]
            if len(data) <= block_size:
                raise ValueError(f"the {split} split has {len(data)} tokens, too few for block_size {block_size}; "
                                 "use more text or a smaller --block-size")

    def batch(self, split, batch_size, block_size, rng):
        """(x, y) of shape (batch_size, block_size): y is x shifted by one token, from random offsets."""
        self.check_fits(block_size, [split])
        data = self.splits[split]
        starts = rng.integers(0, len(data) - block_size, size=batch_size)
        rows = starts[:, None] + np.arange(block_size)  # (B, T)
        return data[rows], data[rows + 1]
