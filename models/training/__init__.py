"""models.training: the training application, its command lines and what they keep on disk.

    train          python -m models.train: the main job
    sample         python -m models.sample: continue a prompt with a trained model
    prepare        python -m models.prepare: text → token shards and meta.json
    eval           python -m models.eval: loss and perplexity over a prepared split
    export_merged  python -m models.export_merged: LoRA adapters folded into a plain folder
    checkpoint     a folder that always holds one complete checkpoint
    data           a text file as training batches
    shards         prepared corpora: shards on disk, memory-mapped
    parallel       the ranks as one World (MPI)
    health         the health report: records, a picture, warnings
"""
