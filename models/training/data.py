"""Training data: a text file, tokenised once, split 90 % / 10 %, served as random contiguous blocks.

An iteration's rows are made by one `Layout`: batch_size x grad_accum x ranks
rows drawn at once from one generator, alike on every rank; rank r trains on
rows [r·B·K, (r+1)·B·K) of them, in K micro-batches of B rows. So N ranks
consume exactly the batches one process with N times the batch (or N times the
accumulation) would, and a run resumed on another number of ranks continues the
same stream whenever B·K·N is unchanged.

The default corpus is Tiny Shakespeare, shipped with the package (see
models/corpus/README.md), so the main job runs offline.
"""
import json
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "tinyshakespeare.txt"


def load_text(path=None):
    """The text of `path` (the shipped Shakespeare when None), with a one-line error when it is missing.

    Its characters as they are, "\r\n" included, as models.prepare reads them (text mode would make it "\n").
    """
    path = Path(path) if path is not None else DEFAULT_CORPUS
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path} (pass --data PATH to a UTF-8 text file)")
    try:
        text = path.read_bytes().decode("utf-8")
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

    def fingerprint(self, tokenizer):
        """One line that differs wherever the tokenizer or the tokens differ: what MPI ranks compare."""
        digest = self._tokens_crc(zlib.crc32(json.dumps(tokenizer.to_dict(), sort_keys=True).encode()))
        return (f"a {tokenizer.kind} tokenizer of {tokenizer.vocab_size} tokens, {len(self.splits['train']):,} train "
                f"/ {len(self.splits['val']):,} val tokens (CRC-32 {digest:08x})")

    def _tokens_crc(self, crc):
        """The CRC-32 of the tokens, continued from `crc`."""
        for split in ("train", "val"):
            crc = zlib.crc32(np.ascontiguousarray(self.splits[split]).tobytes(), crc)
        return crc

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


@dataclass(frozen=True)
class Layout:
    """How an iteration's rows are made: `batch_size` x `grad_accum` micro-batch rows on each of `ranks`."""

    batch_size: int
    grad_accum: int
    ranks: int

    @property
    def rows(self):
        return self.batch_size * self.grad_accum * self.ranks

    def micro_batches(self, x, y, rank):
        """Rank `rank`'s grad_accum slices of batch_size rows, from the whole iteration's (x, y)."""
        first = rank * self.grad_accum * self.batch_size
        for k in range(self.grad_accum):
            part = slice(first + k * self.batch_size, first + (k + 1) * self.batch_size)
            yield x[part], y[part]

    def describe(self):
        return (f"batch {self.batch_size} x grad-accum {self.grad_accum} x {self.ranks} "
                f"rank{'s' * (self.ranks > 1)}")

    def to_dict(self):
        return asdict(self)

    def change_from(self, saved):
        """How this layout differs from a checkpoint's (`saved`), for resume's one line: (changes, remark).

        `changes` lists what no option says (the number of ranks), `remark` whether
        the rows per iteration, and so the batches, stay those of the checkpoint's
        run; ([], None) when nothing changed.
        """
        if saved == self:
            return [], None
        changes = [f"mpiexec -n {saved.ranks} → {self.ranks}"] if saved.ranks != self.ranks else []
        if saved.rows == self.rows:
            return changes, f"still {self.rows} rows per iteration ({self.describe()}), so the same batches"
        return changes, (f"{self.rows} rows per iteration ({self.describe()}) instead of the checkpoint's "
                         f"{saved.rows} ({saved.describe()}): other batches and updates than the first run "
                         "would have made")
