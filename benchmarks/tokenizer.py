"""Encoding throughput of our GPT2Tokenizer beside transformers' GPT-2 tokenizers.

Run from the repository root:  python -m benchmarks.tokenizer [--repeats N] [--corpus FILE]

Every tokenizer encodes the same corpus (Tiny Shakespeare by default) with the
same GPT-2 vocabulary, in one process. "cold" is a fresh instance, so every word
goes through BPE once (transformers' Python tokenizer caches words too);
"warm" encodes again with the cache full. Each figure is the best of --repeats,
and each line says whether its ids equal ours. Prints; asserts nothing.
"""

import argparse
import time
from pathlib import Path

from models.tokenizer import GPT2Tokenizer

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def best_time(make, encode_with, text, repeats, warm):
    """Best wall time of ``encode_with(tokenizer, text)`` over ``repeats`` fresh tokenizers."""
    best, ids = float("inf"), None
    for _ in range(repeats):
        tokenizer = make()
        if warm:
            encode_with(tokenizer, text)
        start = time.perf_counter()
        ids = encode_with(tokenizer, text)
        best = min(best, time.perf_counter() - start)
    return best, ids


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=SHARED_DATA / "tinyshakespeare.txt")
    parser.add_argument("--vocab-dir", type=Path, default=SHARED_DATA / "gpt2",
                        help="folder holding GPT-2's encoder.json and vocab.bpe")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    text = args.corpus.read_text(encoding="utf-8")
    megabytes = len(text.encode("utf-8")) / 1e6
    encoder_json, vocab_bpe = args.vocab_dir / "encoder.json", args.vocab_dir / "vocab.bpe"
    print(f"corpus: {args.corpus} ({megabytes:.2f} MB); best of {args.repeats}")

    contenders = [("ours: models.tokenizer.GPT2Tokenizer",
                   lambda: GPT2Tokenizer.from_files(encoder_json, vocab_bpe),
                   lambda tok, t: tok.encode(t))]
    try:
        import transformers
    except ImportError:
        print("transformers is not installed: only our tokenizer is timed (pip install transformers)")
    else:
        # Positional: transformers 4 calls these vocab_file/merges_file, version 5 vocab/merges.
        classes = {transformers.GPT2Tokenizer, getattr(transformers, "GPT2TokenizerFast", transformers.GPT2Tokenizer)}
        for cls in sorted(classes, key=lambda c: c.__name__):
            backend = "Rust tokenizers" if cls(str(encoder_json), str(vocab_bpe)).is_fast else "pure Python"
            contenders.append((f"transformers {transformers.__version__} {cls.__name__} ({backend})",
                               lambda cls=cls: cls(str(encoder_json), str(vocab_bpe)),
                               lambda tok, t: tok.encode(t)))
    print("(tiktoken needs the network to fetch its vocabulary, so it is not timed)\n")

    results, reference_ids = [], None
    for name, make, encode_with in contenders:
        cold, ids = best_time(make, encode_with, text, args.repeats, warm=False)
        warm, _ = best_time(make, encode_with, text, args.repeats, warm=True)
        if reference_ids is None:
            reference_ids = ids
        same = "same ids" if ids == reference_ids else "DIFFERENT ids"
        results.append((name, cold, warm))
        print(f"{name:<62} cold {megabytes / cold:6.2f} MB/s   warm {megabytes / warm:6.2f} MB/s   "
              f"{len(ids):,} tokens, {same}")

    _, our_cold, our_warm = results[0]
    for name, cold, warm in results[1:]:
        print(f"ours vs {name}: {cold / our_cold:.2f}× (cold), {warm / our_warm:.2f}× (warm) the throughput")


if __name__ == "__main__":
    main()
