"""models: what the engine is for, in three families, each a package of its own.

    models.lessons    the seeds' lessons, number for number, and chapter one's network on Value
    models.gpt        the GPT-2 library: the model, its checkpoints, tokenizers, sampling, the decode path
    models.training   the training application: the CLIs, checkpoints, data, MPI, health

Beside them, what all three and viz share: cli (the command lines' parser and
checks), numbers (how numbers are written), io (atomic files), interrupts (a
Ctrl-C at start-up in one line) and doors.

The short names that DESIGN.md fixes and the README's commands use
(`from models.gpt2 import GPT`, `python -m models.train`) are front doors: a
two-line file here each, which is the real module under its short name
(`models.gpt2 is models.gpt.gpt2`); see doors.py. The code imports by the real path.
"""
