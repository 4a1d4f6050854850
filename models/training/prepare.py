"""python -m models.prepare: text files or folders → token shards and a meta.json, which models.train --data reads.

    python -m models.prepare books/ notes.txt --out data/books --tokenizer gpt2 --workers 2

Tokenizes once, so that training starts at once and holds none of the corpus
in memory (models/training/shards.py describes the folder it writes).

* It streams: each file is cut into sections of about --section-kb, where the
  text tokenizes the same in pieces as whole (a newline, LF or CRLF, or a space
  between two non-space characters), so the tokens are those of each file
  encoded whole, whatever the section size. Finding a cut reads only the bytes
  near it. Shards are written as their tokens come, so memory holds a few
  sections, whatever the corpus or the shard size (a stretch with no such cut
  is one section).
* --workers N tokenizes sections in N processes, each reading its sections'
  bytes itself; the sections' ids come back in order, so the output is byte for
  byte the same for any N. N and --section-kb whose sections in flight would
  hold more than half of the memory are refused before any work (check_fits_memory).
* The validation split is held out by document: with at least 1/--val-fraction
  files, floor(n·f) of the n files in sorted order, spread evenly (the i-th
  when floor((i+1)·f) > floor(i·f): every tenth for 0.1); with fewer, the tail of
  each file (its last fraction f of bytes, from a line or word boundary on:
  after a newline, or the CR of a CRLF).
  With GPT-2's tokenizer every file ends with <|endoftext|>, and a literal
  <|endoftext|> in the text separates documents as well.
* A first pass reads every file once before anything is written: it hashes it,
  checks that it is UTF-8, and gathers a character vocabulary's characters. A
  file whose size or mtime changed by the end is refused (its shards removed).
* It is safe to interrupt: every shard appears whole (models.io.atomic_path),
  and after each one the progress so far goes into prepare_progress.json; the
  same command again checks the finished shards and goes on from there. meta.json
  is written last, so a folder without it is never mistaken for a finished one.
"""
import argparse
import bisect
import codecs
import hashlib
import json
import math
import mmap
import os
import re
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from models.cli import Parser, counted, input_path, interval, machine_memory, output_folder, shows_progress
from models.io import atomic_path, json_type, owned_folder_below, owning_folder, read_json
from models.training.checkpoint import CHECKPOINT_MARKS, writer_lock
from models.training.data import not_utf8
from models.training.shards import (META_FILE, META_FORMAT, PROGRESS_FILE, SPLITS, PreparedData, ShardError,
                                    ShardWriter, field, open_shard, shard_name, token_dtype)
from models.gpt.tokenizer import CharTokenizer, GPT2Tokenizer

def default_workers():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def make_parser():
    p = Parser("python -m models.prepare", __doc__.splitlines()[0])
    p.add_argument("inputs", nargs="+", type=input_path, metavar="PATH",
                   help="text files, or folders searched for --pattern")
    p.add_argument("--out", type=prepared_folder, required=True, metavar="DIR", help="the folder to write")
    p.add_argument("--tokenizer", choices=["char", "gpt2"], default="gpt2",
                   help="characters (a vocabulary from the data) or GPT-2's byte-level BPE")
    p.add_argument("--workers", type=interval(int, "[1, 1024]"), default=default_workers(),
                   help="tokenizing processes (the output does not depend on it); more than the cores are allowed, "
                        "but no faster, and the sections in flight must fit half of the memory")
    p.add_argument("--val-fraction", type=interval(float, "[0, 1)"), default=0.1,
                   help="the share held out for validation, by file or by each file's tail")
    p.add_argument("--shard-tokens", type=interval(int, "[1, inf)"), default=1 << 24, help="tokens per shard")
    p.add_argument("--pattern", type=file_pattern, default="*.txt",
                   help="the files a folder contributes (searched recursively)")
    p.add_argument("--section-kb", type=interval(int, "[1, inf)"), default=1024,
                   help="text per piece of work (the output does not depend on it); each worker's takes about "
                        f"{SECTION_COPIES} times its size in memory as it is tokenized")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (there is none where stderr is not a terminal)")
    return p


def prepared_folder(text):
    """A `type=` function: --out, a folder that can be written and is neither in nor above a training checkpoint's
    or a model's folder (a save replaces the whole checkpoint folder, and its --resume refuses files it lacks; and
    models.train's check_out_dir refuses a checkpoint inside a prepared corpus)."""
    output_folder(text)
    owner = owning_folder(text, CHECKPOINT_MARKS)
    if owner is not None:
        where = "" if owner == Path(os.path.realpath(text)) else "inside "
        raise argparse.ArgumentTypeError(f"{text} is {where}{owner}, which holds a training checkpoint or a model; "
                                         "prepare into a folder of its own")
    below = owned_folder_below(text, CHECKPOINT_MARKS)
    if below is not None:
        raise argparse.ArgumentTypeError(f"{text} holds {below}, a training checkpoint or a model, and models.train "
                                         "saves no checkpoint inside a prepared corpus; prepare into a folder of "
                                         "its own")
    return text


def file_pattern(text):
    """A `type=` function: --pattern, a glob of names under each folder (pathlib's rglob raised a bare
    NotImplementedError on an absolute one, and a ".." would reach files outside the folder given)."""
    if not text or Path(text).is_absolute() or ".." in Path(text).parts:
        raise argparse.ArgumentTypeError(f"{text!r} is not a pattern of file names under a folder; give one such "
                                         "as '*.txt' or 'books/*.md' (not empty, absolute, nor with '..')")
    return text


# A section being tokenized takes about this many times its bytes at its peak (its bytes, its text, the code
# points or the BPE chunks, int64 ids, then the shards' dtype): tracemalloc's peak for a 1 MB section of English
# words was 13 times with characters and 18 with GPT-2's BPE (16 for 16 MB; its word cache is up to 2 MB).
SECTION_COPIES = 18


def slot_tokens(section_kb):
    """The ids a section's slot in Encoders' buffer holds: as many as its bytes, and 64 Ki more for a cut that came
    late (a section with more goes back whole)."""
    return section_kb * 1024 + (1 << 16)


def sections_in_flight(workers):
    """How many sections a pool of `workers` has handed out and not yet given back: two a worker, and one."""
    return 2 * workers + 1


def memory_needed(workers, section_kb):
    """The bytes that tokenizing with `workers` and `section_kb` holds at once: each worker's section as it is
    tokenized and, with a pool, the buffer its ids come back in (Encoders), as uint16 (the narrowest ids)."""
    buffer = sections_in_flight(workers) * slot_tokens(section_kb) * token_dtype(1).itemsize if workers > 1 else 0
    return workers * SECTION_COPIES * section_kb * 1024 + buffer


def check_fits_memory(workers, section_kb):
    """A one-line error naming both options unless memory_needed fits half of this machine's memory (the rest
    is the parent's, the page cache's and the other programs'); made before any file is read or worker forked."""
    memory = machine_memory()
    if memory is None:
        return
    budget, needed = memory // 2, memory_needed(workers, section_kb)
    if needed <= budget:
        return
    # the largest value below the one given that fits, with the other option as given (0 where none does)
    most_workers = bisect.bisect_left(range(1, workers), True, key=lambda w: memory_needed(w, section_kb) > budget)
    most_kb = bisect.bisect_left(range(1, section_kb), True, key=lambda kb: memory_needed(workers, kb) > budget)
    fixes = []
    if most_workers:
        fixes.append(f"fewer --workers (at most {most_workers} with --section-kb {section_kb})")
    if most_kb:
        fixes.append(f"a smaller --section-kb (at most {most_kb} with --workers {workers})")
    if not fixes:  # neither alone is enough: one worker, and the section that fits it
        alone = bisect.bisect_left(range(1, section_kb), True, key=lambda kb: memory_needed(1, kb) > budget)
        fixes.append(f"fewer --workers and a smaller --section-kb together (at most {alone} with --workers 1)")
    ids = f", and {sections_in_flight(workers)} sections of ids" if workers > 1 else ""
    raise ValueError(f"--workers {workers} with --section-kb {section_kb} would hold about {needed / 2 ** 30:.1f} "
                     f"GiB at once (each worker's section as it is tokenized, about {SECTION_COPIES} times its size"
                     f"{ids}), more than half of this machine's {memory / 2 ** 30:.1f} GiB of memory; give "
                     + " or ".join(fixes))


@dataclass(frozen=True)
class Part:
    """A stretch of bytes of one source file that goes to one split; `ends_file` when it reaches the file's end."""

    path: Path
    start: int
    end: int
    split: str
    ends_file: bool


def find_sources(inputs, pattern):
    """The files named, and those under the folders named that match `pattern` (hidden ones aside), each once."""
    files = []
    for given in map(Path, inputs):
        if given.is_dir():
            found = sorted(p for p in given.rglob(pattern)
                           if p.is_file() and not any(part.startswith(".") for part in p.relative_to(given).parts))
            if not found:
                raise ValueError(f"{given} holds no file matching {pattern!r} (see --pattern)")
            files += found
        else:  # a file (cli.input_path has refused the rest)
            files.append(given)
    seen = {}
    for path in files:
        first = seen.setdefault(path.resolve(), path)
        if first is not path:
            raise ValueError(f"{first} and {path} are the same file (given twice, or a symbolic link to it), whose "
                             "text would count twice; name each file or folder once, and leave out links to files "
                             "already given")
    return files


def check_out_outside_inputs(out, inputs):
    """A one-line error if the folder `out` is one of the folders in `inputs` or inside one: a later run with a
    --pattern that matches its meta.json or shards would read them as the corpus."""
    where = Path(os.path.realpath(out))
    for given in map(Path, inputs):
        folder = Path(os.path.realpath(given))
        if given.is_dir() and (where == folder or folder in where.parents):
            place = "is" if where == folder else "is inside"
            raise ValueError(f"--out {out} {place} the input folder {given}, where a --pattern that matches its "
                             f"meta.json or shards would read them as text; prepare into a folder outside {given}")


# A newline (LF or CRLF) or a space between two non-space characters: encoding the text on its two
# sides apart gives the tokens of the whole, since GPT-2's chunks never cross it. The cut comes after
# the newline, and before the space (which joins the next word). A CRLF is cut between its \r and
# \n: the whole text's chunks are "\r" and "\n" there, where a cut after both would make "\r\n" one.
_CUT = re.compile(r"(?<=\S)(?:\n(?=\S)|\r(?=\n\S)|(?= \S))")
CUTS = 3  # the version of that rule, in a saved progress: a rerun after a change starts afresh


def next_cut(f, start, end, window=1 << 16):
    """The first offset in [start, end) of the open binary file `f` where its text may be cut, else `end`.

    It reads `window` bytes at a time, trimmed to whole UTF-8 characters (bad
    bytes are the encoder's to report); in UTF-8 a newline, a carriage return or a
    space never occurs inside a character.
    """
    at = start
    while at < end:
        origin = max(at - 5, 0)  # a cut at `at` after a newline or a CRLF's \r needs it and the character before it
        f.seek(origin)
        raw = f.read(window)
        first, last = 0, len(raw)
        while first < last and 0x80 <= raw[first] < 0xC0:  # the rest of a character before the window
            first += 1
        if len(raw) == window:  # not the file's end: drop a character the window may cut short
            while last > first and 0x80 <= raw[last - 1] < 0xC0:
                last -= 1
            last = max(last - 1, first)
        text = raw[first:last].decode("utf-8", "surrogateescape")
        for match in _CUT.finditer(text):
            cut = origin + first + len(text[:match.end()].encode("utf-8", "surrogateescape"))
            if cut >= at:
                return min(cut, end)
        if len(raw) < window or not text:
            return end
        # The last character's cut needs the one after it: the next window starts there.
        at = max(origin + first + len(text[:-1].encode("utf-8", "surrogateescape")), at + 1)
    return end


# A val tail this long with no cut in it is a file without line breaks (one huge line), not a corpus too small.
UNCUT_TAIL = 1024


def tail_start(path, size, val_fraction):
    """Where the validation tail of the file at `path` starts: the first cut at or after its last fraction."""
    with open(path, "rb") as f:
        return next_cut(f, int(size * (1 - val_fraction)), size)


def plan_parts(files, val_fraction):
    """Every file's parts in order, and how the split was made ("file" or "tail")."""
    sizes = [path.stat().st_size for path in files]
    f = Fraction(repr(val_fraction))  # exact: 0.1 is a tenth, so every tenth file
    if len(files) * f >= 1:
        return [Part(path, 0, size, "val" if (i + 1) * f // 1 > i * f // 1 else "train", True)
                for i, (path, size) in enumerate(zip(files, sizes))], "file"
    parts = []
    for path, size in zip(files, sizes):
        cut = tail_start(path, size, val_fraction) if val_fraction else size
        parts.append(Part(path, 0, cut, "train", cut == size))
        if cut < size:
            parts.append(Part(path, cut, size, "val", True))
    return parts, "tail"


@dataclass(frozen=True)
class Section:
    """The `index`-th piece of work: the bytes [start, end) of a part, cut where the text may be cut."""

    index: int
    part: Part
    start: int
    end: int

    @property
    def ends_file(self):
        return self.part.ends_file and self.end == self.part.end


def sections(parts, section_bytes):
    """Every part's sections, of about `section_bytes` each, in order: found by reading only near the cuts."""
    index = 0
    for part in parts:
        with open(part.path, "rb") as f:
            start = part.start
            while start < part.end:
                end = next_cut(f, start + section_bytes, part.end) if start + section_bytes < part.end else part.end
                yield Section(index, part, start, end)
                index, start = index + 1, end


def read_bytes(section):
    with open(section.part.path, "rb") as f:
        f.seek(section.start)
        raw = f.read(section.end - section.start)
    if len(raw) < section.end - section.start:
        raise ValueError(f"{section.part.path} became shorter while it was read; prepare it again")
    return raw


def read_text(section):
    """A section's text, read from its file by whoever encodes it (a worker reads its own)."""
    raw = read_bytes(section)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:  # the first pass found none: the file changed since (said as such)
        raise ValueError(not_utf8(section.part.path, b"", raw[exc.start], section.start + exc.start)) from None


def first_pass(files, progress, characters):
    """Every file read once, before anything is written: its SHA-256 (by path), and every character of the files
    when `characters` (for a character vocabulary); a file that is not UTF-8 is refused here, not midway.

    The code points are counted with NumPy: about four times faster than a set of the text's characters.
    """
    codes, hashes = set(), {}
    for path in files:
        decoder, hasher, at, head = codecs.getincrementaldecoder("utf-8")(), hashlib.sha256(), 0, b""
        with open(path, "rb") as f:
            while True:
                raw = f.read(1 << 20)
                head = head or raw  # the file's start: a byte order mark says which encoding it is
                text = decode_text(path, head, decoder, raw, at, final=not raw)
                if not raw:
                    break
                hasher.update(raw)
                if text and characters:
                    codes.update(np.flatnonzero(np.bincount(np.frombuffer(text.encode("utf-32-le"), "<u4"))).tolist())
                at += len(raw)
                progress(len(raw))
        hashes[path] = hasher
    return hashes, "".join(map(chr, codes))


def decode_text(path, head, decoder, raw, at, final):
    """`raw`, the bytes at offset `at` of the file at `path` (which starts with `head`), through the incremental
    UTF-8 `decoder`; not_utf8's error at the first byte that shows the file is not UTF-8 text: one that does not
    decode, or a NUL (valid UTF-8, but binary, or UTF-16 without its mark)."""
    pending = len(decoder.getstate()[0])
    try:
        text = decoder.decode(raw, final=final)
    except UnicodeDecodeError as exc:
        raise ValueError(not_utf8(path, head, exc.object[exc.start], at - pending + exc.start)) from None
    if b"\0" in raw:
        raise ValueError(not_utf8(path, head, 0, at + raw.index(b"\0")))
    return text


def check_start_is_text(path, nbytes=4096):
    """The first pass's error for the file at `path` if its first `nbytes` show it is not UTF-8 text (a character
    cut short by the end of the window aside)."""
    with open(path, "rb") as f:
        head = f.read(nbytes)
    decode_text(path, head, codecs.getincrementaldecoder("utf-8")(), head, 0, final=len(head) < nbytes)


class SectionEncoder:
    """A section's text → its token ids (the tokenizer's `encode_array`) as an array of the shards' dtype, with
    GPT-2's <|endoftext|> after a file's last section."""

    def __init__(self, tokenizer, dtype):
        self.tokenizer, self.dtype = tokenizer, dtype
        self.end = getattr(self.tokenizer, "eot_token", None)

    def __call__(self, section):
        ids = self.tokenizer.encode_array(read_text(section)).astype(self.dtype)
        if section.ends_file and self.end is not None:
            ids = np.append(ids, np.array([self.end], dtype=self.dtype))
        return ids


_worker = None  # a worker's encoder and the slots it hands ids back in


def _start_worker(encoder, slots):
    global _worker
    _worker = encoder, slots  # forked: the parent's very objects (no pickling, no second vocabulary load)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the pool
    _end_with_parent()


def _end_with_parent():
    """Have Linux end this worker the moment its parent dies: left running, it would print a BrokenPipeError
    traceback at its next result, into the terminal the killed parent shared with it."""
    if sys.platform != "linux":
        return
    import ctypes
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() == 1:  # the parent died before the call: nobody is left to send the signal
        os._exit(1)


def _encode_in_worker(section, slot):
    """A section's ids: written into the shared `slot` (only their count goes back), or sent whole."""
    encoder, slots = _worker
    ids = encoder(section)
    if slots is None or len(ids) > slots.shape[1]:
        return ids
    slots[slot, :len(ids)] = ids
    return len(ids)


class SplitWriter:
    """One split's shards, each written as its tokens come and given its real name (atomically) once full.

    `done` lists the finished shards, each with where the next one's tokens start
    (a section index and an offset among its tokens): a rerun goes on from the last.
    """

    def __init__(self, folder, split, dtype, shard_tokens, done):
        self.folder, self.split, self.dtype, self.shard_tokens = folder, split, dtype, shard_tokens
        self.done = list(done)
        self.resume_section, self.resume_offset = (done[-1]["next"] if done else (0, 0))
        self.new_tokens = 0
        self._target = self._shard = None  # the shard being written: its atomic_path, its ShardWriter

    def wants(self, section):
        return section >= self.resume_section

    def add(self, section, ids):
        """Take a section's ids; True when a shard was finished (the progress should be saved)."""
        offset = self.resume_offset if section == self.resume_section else 0
        finished = False
        while offset < len(ids):
            if self._shard is None:
                self._target = atomic_path(self.folder / shard_name(self.split, len(self.done)))
                self._shard = ShardWriter(self._target.__enter__(), self.dtype)
            take = min(len(ids) - offset, self.shard_tokens - self._shard.count)
            self._shard.write(ids[offset:offset + take])
            offset += take
            self.new_tokens += take
            if self._shard.count == self.shard_tokens:
                self._finish_shard(next_at=[section, offset] if offset < len(ids) else [section + 1, 0])
                finished = True
        return finished

    def finish(self):
        if self._shard is not None:
            self._finish_shard(next_at=None)

    def abandon(self):
        """Remove the shard being written (a run that stops midway leaves only finished ones)."""
        if self._shard is not None:
            self._shard.file.close()
            self._target.__exit__(*sys.exc_info())

    def _finish_shard(self, next_at):
        crc, count = self._shard.close(), self._shard.count
        self._target.__exit__(None, None, None)  # flushed to the disk and renamed: it appears whole
        self.done.append({"name": shard_name(self.split, len(self.done)), "tokens": count, "crc32": crc,
                          "next": next_at})
        self._target = self._shard = None

    @property
    def tokens(self):
        return sum(shard["tokens"] for shard in self.done)


def verified_shards(folder, shards):
    """The leading shards of a saved progress that are on disk as recorded (a rerun redoes the rest)."""
    good = []
    for shard in shards:
        try:
            tokens = open_shard(folder / shard["name"], verify=True)
        except ShardError:
            break
        if len(tokens) != shard["tokens"] or shard["next"] is None:
            break
        good.append(shard)
    return good


def check_progress(path, saved):
    """A one-line error naming `path` (prepare_progress.json) and the field unless `saved` is what a run writes."""
    try:
        for key, kind, meaning in (("plan", dict, "an object"), ("tokenizer", dict, "an object"),
                                   ("sectioning", dict, "an object"), ("shards", dict, "an object")):
            field(path, saved, key, kind, meaning)
        for split in SPLITS:
            field(path, saved["shards"], split, list, "an array", prefix="shards.")
            for i, shard in enumerate(saved["shards"][split]):
                where = f"shards.{split}[{i}]."
                if not isinstance(shard, dict):
                    raise ShardError(f"{path}: '{where[:-1]}' should be an object, not {json_type(shard)}")
                field(path, shard, "name", str, f"{shard_name(split, i)}", lambda name: name == shard_name(split, i),
                      where)
                field(path, shard, "tokens", int, "a count of tokens", lambda n: n >= 0, where)
                field(path, shard, "crc32", int, "a CRC-32", lambda n: 0 <= n < 1 << 32, where)
                if shard.get("next") is not None:
                    field(path, shard, "next", list, "[section, offset], two counts",
                          lambda at: len(at) == 2 and all(type(n) is int and n >= 0 for n in at), where)
    except ShardError as exc:
        raise ShardError(f"{exc.args[0].replace('prepare the corpus again', '')}delete it to prepare afresh")


def write_json(path, obj):
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=1), encoding="utf-8")


class Bar:
    """The progress bar: MB read, MB/s and tokens/s."""

    def __init__(self, total, desc, disable):
        from tqdm import tqdm

        class Unmonitored(tqdm):
            # tqdm's monitor is a thread that takes its lock and writes to stderr: the workers are forked
            # (Encoders), which is safe from a process with one thread alone (Python 3.12 warns otherwise)
            monitor_interval = 0

        self.bar = Unmonitored(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1000,
                               disable=disable, dynamic_ncols=True, file=sys.stderr)
        self.start = time.perf_counter()

    def advance(self, nbytes):
        self.bar.update(nbytes)

    def tokens(self, count):
        """The tokens made so far, shown as a rate."""
        self.bar.set_postfix_str(f"{count / max(time.perf_counter() - self.start, 1e-9):,.0f} tokens/s")

    def close(self):
        self.bar.close()


def prepare(args):
    """Prepare the corpus as `args` say; the summary line."""
    started = time.perf_counter()
    out = Path(args.out)
    check_out_outside_inputs(out, args.inputs)
    files = find_sources(args.inputs, args.pattern)
    plan = planned(args, files)  # before any byte is read: a file that differs from it at the end is refused
    parts, split_by = plan_parts(files, args.val_fraction)
    total_bytes = sum(source["bytes"] for source in plan["sources"])
    if not total_bytes:
        raise ValueError(f"{', '.join(map(str, files))}: no text (0 bytes), so nothing to prepare")
    for split in SPLITS if args.val_fraction else SPLITS[:1]:  # models.train refuses a split with no tokens
        if not any(part.end > part.start for part in parts if part.split == split):
            for path in files:  # a binary file has no line to cut at either: that is the thing to say
                check_start_is_text(path)
            if split_by == "file":
                held = [part.path for part in parts if part.split == split]
                raise ValueError(f"--val-fraction {args.val_fraction:g} splits the {len(files)} files by whole file, "
                                 f"and the {split} split's {'file is' if len(held) == 1 else 'files are all'} empty "
                                 f"({', '.join(map(str, held))}); leave the empty files out, or put text in them")
            uncut = max((p for p in parts if p.split == "train"), key=lambda p: p.end - p.start)
            tail = uncut.end - int(uncut.end * (1 - args.val_fraction))
            if split == "val" and split_by == "tail" and tail >= UNCUT_TAIL:
                raise ValueError(f"{uncut.path}: its last {args.val_fraction:.0%} ({tail:,} bytes) has no line "
                                 "break or space between words to cut a val split at; break its lines, give "
                                 f"{math.ceil(1 / Fraction(repr(args.val_fraction)))} or more files (a val split "
                                 "by file), or --val-fraction 0 for none")
            raise ValueError(f"the corpus ({total_bytes:,} bytes) is too small to hold out a {split} split with "
                             f"--val-fraction {args.val_fraction:g}; give more text, or --val-fraction 0 for none")
    afresh = ""
    if (out / META_FILE).is_file():
        meta = read_json(out / META_FILE)
        if meta.get("plan") != plan:
            raise ValueError(f"{out} holds a corpus prepared from other files or options; "
                             "choose another --out, or delete it first")
        damage = damaged_shard(out)
        if damage is None:
            return f"{out} already holds this corpus: " + describe(meta)
        # models.train refuses a missing or damaged shard and says to prepare the folder again: that must redo
        # it, not answer "already holds" for ever. meta.json goes first, so that an interruption from here on
        # leaves a folder that reads as unfinished, never one that lists shards being rewritten.
        (out / META_FILE).unlink()
        afresh = f"; prepared afresh, since {damage}"
    progress_path = out / PROGRESS_FILE
    saved = read_json(progress_path) if progress_path.is_file() else None
    if saved is not None:
        check_progress(progress_path, saved)
    if saved is not None and saved.get("plan") != plan:
        raise ValueError(f"{out} holds an unfinished preparation of other files or options; "
                         "choose another --out, or delete it first")
    bar = Bar(total_bytes, "reading", not shows_progress(args.no_progress))
    hashes, characters = first_pass(files, bar.advance, args.tokenizer == "char")
    bar.close()
    out.mkdir(parents=True, exist_ok=True)
    for debris in out.glob(".*.tmp-*"):  # what atomic_path leaves of a killed write
        debris.unlink()

    tokenizer = CharTokenizer(characters or "\n") if args.tokenizer == "char" else GPT2Tokenizer()
    description, dtype = tokenizer.to_dict(), token_dtype(tokenizer.vocab_size)
    # A saved progress counts sections: it holds for the same cuts of the same sections only.
    sectioning = {"section_kb": args.section_kb, "cuts": CUTS}
    done = {split: verified_shards(out, saved["shards"][split]) if saved else [] for split in SPLITS}
    if saved is not None and (saved["tokenizer"], saved.get("sectioning")) != (description, sectioning):
        done = {split: [] for split in SPLITS}
    writers = {split: SplitWriter(out, split, dtype, args.shard_tokens, done[split]) for split in SPLITS}
    resumed = sum(map(len, done.values()))

    def save_progress():
        write_json(progress_path, {"plan": plan, "tokenizer": description, "sectioning": sectioning,
                                   "command": sys.argv,
                                   "shards": {split: w.done for split, w in writers.items()}})

    def new_tokens():
        return sum(w.new_tokens for w in writers.values())

    bar = Bar(total_bytes, "tokenizing", not shows_progress(args.no_progress))
    tasks = sections(parts, args.section_kb * 1024)
    def changed_sources():
        """The first file whose size or mtime is no longer the plan's, else None."""
        now = planned(args, files)["sources"]
        return next((path for path, was, is_ in zip(files, plan["sources"], now) if was != is_), None)

    try:
        with Encoders(SectionEncoder(tokenizer, dtype), args.workers, slot_tokens(args.section_kb)) as encode:
            for section, ids in encode(tasks, lambda section: writers[section.part.split].wants(section.index)):
                if writers[section.part.split].add(section.index, ids):
                    save_progress()
                bar.advance(section.end - section.start)
                bar.tokens(new_tokens())
        changed = changed_sources()
    except BaseException as exc:
        # a text changed midway fails the encoder too (a character not in the vocabulary): said below
        changed = changed_sources() if isinstance(exc, ValueError) else None
        if changed is None:
            for writer in writers.values():
                writer.abandon()
            raise
    if changed is not None:
        for writer in writers.values():
            writer.abandon()
        # The shards hold neither the old text nor the new: none is kept, nor a progress to go on from.
        progress_path.unlink(missing_ok=True)
        for shard in own_shards(out):
            shard.unlink()
        raise ValueError(f"{changed} changed while being read (its size or mtime); no shard was kept: "
                         "prepare again once nothing writes to it")
    for writer in writers.values():
        writer.finish()
    bar.close()

    meta = {"format": META_FORMAT, "tokenizer": description, "vocab_size": tokenizer.vocab_size,
            "dtype": dtype.name, "shard_tokens": args.shard_tokens,
            "split": {"by": split_by, "val_fraction": args.val_fraction,
                      "val": [{"path": str(p.path), "from_byte": p.start} for p in parts if p.split == "val"]},
            "splits": {split: {"tokens": w.tokens, "shards": [{k: shard[k] for k in ("name", "tokens", "crc32")}
                                                              for shard in w.done]}
                       for split, w in writers.items()},
            "sources": [{"path": str(path), "bytes": source["bytes"], "sha256": hashes[path].hexdigest()}
                        for path, source in zip(files, plan["sources"])],
            "bytes": total_bytes, "plan": plan}
    write_json(out / META_FILE, meta)
    progress_path.unlink(missing_ok=True)
    listed = {shard["name"] for w in writers.values() for shard in w.done}
    for stale in own_shards(out):
        if stale.name not in listed:
            stale.unlink()
    seconds = time.perf_counter() - started
    note = f"; went on after {resumed} finished shard{'s' * (resumed != 1)}" if resumed else ""
    return (f"prepared {out}: " + describe(meta) + f"; {seconds:.1f} s, {total_bytes / 1e6 / seconds:.1f} MB/s, "
            f"{new_tokens() / seconds:,.0f} tokens/s" + note + afresh)


def damaged_shard(out):
    """What is wrong with the first shard of the finished folder `out` that models.train would refuse (missing,
    truncated, not as its meta.json lists it, or tokens that fail its checksum or the vocabulary), in a few words;
    None when all are whole. PreparedData's own checks, every token read once, made before saying all is well."""
    try:
        for tokens in PreparedData(out).splits.values():
            for k in range(len(tokens.paths)):
                tokens.verify(k)
    except ShardError as exc:
        return str(exc).split(";")[0]  # the what, without the advice to prepare again: this run does so
    return None


def own_shards(out):
    """The files in `out` named as prepare names its shards (shard_name: train_000000.bin...), and no others."""
    return [p for p in out.iterdir() if re.fullmatch(rf"(?:{'|'.join(SPLITS)})_[0-9]{{6,}}\.bin", p.name)]


def planned(args, files=None):
    """What a preparation is of (its sources as they stand, and the options that shape its output): a rerun
    goes on from a saved progress, or finds a finished folder, only where this is unchanged."""
    files = find_sources(args.inputs, args.pattern) if files is None else files
    return {"sources": [{"path": str(path), "bytes": path.stat().st_size, "mtime_ns": path.stat().st_mtime_ns}
                        for path in files],
            "tokenizer": args.tokenizer, "val_fraction": args.val_fraction, "shard_tokens": args.shard_tokens}


def describe(meta):
    """The corpus of a meta.json in a few words: files, tokens per split, tokenizer, shards."""
    train, val = (meta["splits"][split] for split in SPLITS)
    kind, shards = meta["tokenizer"]["kind"], len(train["shards"]) + len(val["shards"])
    return (f"{counted(len(meta['sources']), 'file')} ({meta['bytes'] / 1e6:.1f} MB) → "
            f"{train['tokens']:,} train + {val['tokens']:,} val tokens (held out by {meta['split']['by']}), "
            f"{kind} tokenizer ({meta['vocab_size']:,} ids, {meta['dtype']}), "
            f"{counted(shards, 'shard')}")


class Encoders:
    """Sections → ids, in the sections' order: in this process (one worker) or in a pool of processes.

    A forked pool hands each section's ids back through memory it shares with
    this process, one slot per section in flight: sent through a pipe instead,
    a character corpus's ids (two bytes a character) made two workers slower
    than one.
    """

    def __init__(self, encoder, workers, slot_tokens):
        self.encoder, self.workers, self.slot_tokens = encoder, workers, slot_tokens
        self.pool = self.slots = None

    def __enter__(self):
        if self.workers == 1:
            return lambda tasks, wanted: ((section, self.encoder(section)) for section in tasks if wanted(section))
        import multiprocessing
        # Forked from one thread: OpenBLAS stops its threads for a fork (pthread_atfork), and the bars have no
        # monitor thread (Bar). Called where other threads run (numba's, after training in this process), the
        # workers, which only encode in numba's serial kernels, take no lock of theirs.
        forked = sys.platform == "linux"
        if forked:  # an anonymous shared mapping, which forked workers inherit
            in_flight, dtype = sections_in_flight(self.workers), np.dtype(self.encoder.dtype)
            buffer = mmap.mmap(-1, in_flight * self.slot_tokens * dtype.itemsize)
            self.slots = np.frombuffer(buffer, dtype=dtype).reshape(in_flight, self.slot_tokens)
        self.pool = multiprocessing.get_context("fork" if forked else "spawn").Pool(
            self.workers, _start_worker, (self.encoder, self.slots))
        return self._in_pool

    def _in_pool(self, tasks, wanted):
        """Each wanted section with its ids; at most two sections per worker in flight, so memory stays bounded.
        A worker reads its section's text itself: only its place in the file is sent."""
        pending, free = deque(), list(range(sections_in_flight(self.workers)))

        def oldest():
            section, slot, result = pending.popleft()
            got = result.get()
            free.append(slot)  # taken again only once the caller has written these ids
            return section, got if self.slots is None or not isinstance(got, int) else self.slots[slot, :got]

        for section in tasks:
            if wanted(section):
                slot = free.pop()
                pending.append((section, slot, self.pool.apply_async(_encode_in_worker, (section, slot))))
            while len(pending) > 2 * self.workers:
                yield oldest()
        while pending:
            yield oldest()

    def __exit__(self, *exc):
        if self.pool is None:
            return
        if exc[0] is None:
            self.pool.close()
        else:
            self.pool.terminate()
        self.pool.join()


def main(argv=None):
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        check_fits_memory(args.workers, args.section_kb)
    except ValueError as exc:
        parser.error(str(exc))
    out = Path(args.out)
    made = None  # the first folder of --out's path that this run makes, if any
    if not out.exists():
        made = out
        while not made.parent.exists():
            made = made.parent
    try:
        # two runs into one folder would each write shards over the other's, and both say "prepared"
        with writer_lock(out, "models.prepare run", "--out"):
            print(prepare(args))
    except (ValueError, OSError) as exc:
        _drop_if_empty(out, made)
        print(f"prepare: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        _drop_if_empty(out, made)
        progress = out / PROGRESS_FILE  # written after each shard: without it there is nothing to go on from
        kept = (f"the shards written so far are whole: run the same command again to go on (see {progress})"
                if progress.is_file() else
                "nothing was saved to go on from: run the same command again to start afresh")
        print(f"\nprepare: interrupted; {kept}", file=sys.stderr)
        return 130
    return 0


def _drop_if_empty(out, made):
    """A failed first run leaves no empty folder behind (a text that is not UTF-8 fails after making --out, and
    the lock beside --out makes its parent): the folders from --out up to `made`, the first that it made, while
    they are empty."""
    if made is None:
        return
    for folder in (out, *out.parents):
        if folder.is_dir():
            if any(folder.iterdir()):
                return
            folder.rmdir()
        if folder == made:
            return


if __name__ == "__main__":
    sys.exit(main())
