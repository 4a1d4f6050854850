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
import codecs
import json
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "tinyshakespeare.txt"


def load_text(path=None, what="data file"):
    """The text of `path` (the shipped Shakespeare when None), with a one-line error when it is missing; the
    errors call it `what` (the option that gave it: "--prompt-file").

    Its characters as they are, "\r\n" included, as models.prepare reads them (text mode would make it "\n").
    """
    path = Path(path) if path is not None else DEFAULT_CORPUS
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path} (pass --data PATH to a UTF-8 text file)")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(not_utf8(f"{what} {path}", raw, raw[exc.start], exc.start)) from None
    if "\0" in text:
        raise ValueError(not_utf8(f"{what} {path}", raw, 0, raw.index(b"\0")))
    if not text:
        raise ValueError(f"{what} {path} is empty; give it some text")
    return text


# A UTF-16 or UTF-32 file starts with its byte order mark (as Windows editors write them): the 32-bit ones first,
# since UTF-32-LE's starts with UTF-16-LE's.
BYTE_ORDER_MARKS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
                    (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def not_utf8(what, head, byte, offset):
    """The one line for a file (`what` names it) that is not UTF-8 text, from its first bytes `head` and the first
    bad `byte` (or NUL) in it, at `offset`, with the iconv command that converts it.

    `iconv -t utf-8` alone converts from the locale's charset, UTF-8 on most systems: it fails on the very bytes
    refused here, so the command names the file's own encoding. A NUL byte is valid UTF-8 but no text holds one:
    the file is binary, or UTF-16 without its byte order mark (each ASCII character is followed by a NUL).
    """
    found = f"a NUL byte at offset {offset}" if byte == 0 else f"byte {byte:#04x} at offset {offset}"
    encoding = next((name for bom, name in BYTE_ORDER_MARKS if head.startswith(bom)), None)
    if encoding is not None:
        return (f"{what} is not UTF-8 text but {encoding.upper()} (it starts with a byte order mark); convert it "
                f"first: `iconv -f {encoding} -t utf-8 FILE > NEW.txt`")
    if byte == 0 or b"\0" in head[:4096]:
        return (f"{what} is not UTF-8 text ({found}): it is binary, or UTF-16 text; leave it out, or convert it "
                "first: `iconv -f utf-16le -t utf-8 FILE > NEW.txt` (UTF-8 text with stray NULs: "
                "`tr -d '\\000' < FILE > NEW.txt`)")
    return (f"{what} is not UTF-8 text ({found}); convert it first from its encoding, e.g. "
            "`iconv -f latin1 -t utf-8 FILE > NEW.txt` (or cp1252, shift-jis, ...)")


class TokenData:
    """Token ids split into a training part (the first 90 %) and a validation part (the rest)."""

    def __init__(self, ids, val_fraction=0.1):
        ids = np.asarray(ids, dtype=np.int64)
        cut = int(len(ids) * (1 - val_fraction))
        self.splits = {"train": ids[:cut], "val": ids[cut:]}

    def fingerprint(self, tokenizer):
        """One line that differs wherever the tokenizer or the tokens differ: what MPI ranks compare, and what a
        checkpoint records of the data it trained on, for --resume to compare (checkpoint.check_data)."""
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

    def change_from(self, saved, training=True):
        """How this layout differs from a checkpoint's (`saved`), for resume's one line: (changes, remark).

        `changes` lists what no option says (the number of ranks), `remark` whether
        the rows per iteration, and so the batches, stay those of the checkpoint's
        run; ([], None) when nothing changed. Not `training` (--eval-only), the
        remark speaks of batches alone.
        """
        if saved == self:
            return [], None
        changes = [f"mpiexec -n {saved.ranks} → {self.ranks}"] if saved.ranks != self.ranks else []
        if saved.rows == self.rows:
            return changes, f"still {self.rows} rows per iteration ({self.describe()}), so the same batches"
        made = "other batches and updates than the first run would have made" if training else \
            "other batches than the first run's evaluations"
        return changes, (f"{self.rows} rows per iteration ({self.describe()}) instead of the checkpoint's "
                         f"{saved.rows} ({saved.describe()}): {made}")
