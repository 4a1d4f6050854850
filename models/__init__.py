"""models: what the engine is for, in three families, each a folder of its own.

    lessons/    the seeds' lessons, number for number: bigram, softmax, tiny, neuron;
                chapter one's network on Value: value_nn (Neuron, Layer, MLP) and moons (micrograd's demo);
                troubleshoot (when training fails)
    gpt/        the GPT-2 library: gpt2 (the model), gpt2_params, hf_checkpoint, sampling, tokenizer
                (bpe_kernels: its compiled encoding)
    training/   the training application: train, sample, prepare and eval (the CLIs), checkpoint, parallel (MPI),
                data, shards (prepared corpora)

Beside them, at this level, what all three and viz share: cli (the command
lines' parser and checks), numbers (how numbers are written), io (atomic files),
interrupts (a Ctrl-C at start-up in one line).

A module keeps its short name whichever folder holds it: `models.bigram`,
`models.gpt2`, `models.train` (so `python -m models.train` and
`from models.gpt2 import GPT` read as they always have). The folders are
searched as parts of this one package, in the order above; no name occurs twice.
"""
import os

# os.path, not pathlib: os is loaded with the interpreter, and a command's start-up (see models/interrupts.py)
# should reach its first line as soon as it can.
__path__ += [os.path.join(os.path.dirname(__file__), family) for family in ("lessons", "gpt", "training")]
