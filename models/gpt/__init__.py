"""models.gpt: the GPT-2 library, from the model to its checkpoints and tokens.

    gpt2            GPT-2, read top to bottom: config, layers, model, generate
    gpt2_params     where GPT-2's parameters are, tensor by tensor
    hf_checkpoint   Hugging Face's folder format: config.json + model.safetensors
    sampling        the next token: greedy, temperature, top-k, top-p
    decode          the static-cache one-token decode path (a CUDA graph on a GPU)
    decode_kernels  that path's kernels, with their NumPy twins
    tokenizer       characters, lesson 1's BPE trainer, GPT-2's byte-level BPE
    bpe_kernels     the byte-level BPE's compiled encoding
"""
