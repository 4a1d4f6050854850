"""models.train --lora-r on a tiny random GPT-2 folder: adapters-only checkpoints, exact resume, sampling, the merged
export that transformers loads, a base that changed, and --checkpoint-blocks changing no number."""
import json
import os

import numpy as np
import pytest
from safetensors.numpy import load_file

import autograd as ag
from models.training import checkpoint, export_merged, sample, train
from models.gpt.gpt2 import GPT, GPTConfig
from models.gpt.tokenizer import CharTokenizer
from tests.models.conftest import random_gpt2_folder

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll:\nSpeak, speak.\n" * 30
RUN = ["--n-layer", "1", "--batch-size", "4", "--block-size", "16", "--eval-interval", "2", "--eval-iters", "2",
       "--warmup-iters", "1", "--lr-decay-iters", "6", "--peak-tflops", "1", "--no-progress", "--sample-tokens", "0",
       "--lr", "1e-2"]


@pytest.fixture
def base(tmp_path):
    """A random GPT-2 folder with a character tokenizer, as a user's pretrained model stands in for here."""
    return random_gpt2_folder(tmp_path, TEXT, n_layer=2)


def lora_run(capsys, base, out, *more):
    code = train.main([*RUN, "--data", str(base / "text.txt"), "--init-from", str(base / "base"), "--lora-r", "2",
                       "--lora-targets", "c_attn,c_fc", "--out-dir", str(out), *more])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    return printed.out


def test_the_checkpoint_holds_the_adapters_alone_and_resumes_exactly(base, capsys):
    out = lora_run(capsys, base, base / "straight", "--max-iters", "6")
    assert "lora: rank 2 adapters in 4 layers (c_attn, c_fc)" in out
    adapters = load_file(str(base / "straight" / "adapters.safetensors"))
    assert sorted(adapters) == sorted(f"transformer.h.{i}.{m}.lora_{ab}" for i in range(2)
                                      for m in ("attn.c_attn", "mlp.c_fc") for ab in "AB")
    assert not (base / "straight" / "model.safetensors").exists()
    config = json.loads((base / "straight" / "adapter_config.json").read_text())
    assert config["folder"] == str((base / "base").resolve())
    assert config["sha256"] == checkpoint.fingerprint(base / "base")
    with np.load(base / "straight" / "optimizer.npz") as f:  # moments for the adapters alone
        moments = sum(f[k].size for k in f.files if k.endswith(("exp_avg", "exp_avg_sq")))
    assert moments == 2 * sum(a.size for a in adapters.values())

    lora_run(capsys, base, base / "split", "--max-iters", "4")
    train.main([*RUN, "--resume", "--max-iters", "6", "--out-dir", str(base / "split")])
    capsys.readouterr()
    straight, split = (json.loads((base / f / "train_state.json").read_text()) for f in ("straight", "split"))
    assert straight["history"] == split["history"] and len(split["history"]) == 6
    resumed = load_file(str(base / "split" / "adapters.safetensors"))
    assert all(np.array_equal(adapters[k], resumed[k]) for k in adapters)


def test_a_rank_whose_adapters_take_the_fused_adamw_trains(base, capsys):
    """Rank 4 gives 1,152 adapter values, enough for AdamW's flat kernel, which once stopped at the first step on
    the empty no-decay group that LoRA leaves (every bias and norm frozen)."""
    out = lora_run(capsys, base, base / "r4", "--max-iters", "2", "--lora-r", "4")
    assert "lora: rank 4 adapters in 4 layers (c_attn, c_fc)" in out
    assert (base / "r4" / "adapters.safetensors").exists()


def test_sample_and_the_merged_export_give_the_adapted_models_tokens_and_logits(base, capsys):
    lora_run(capsys, base, base / "o", "--max-iters", "4")
    assert sample.main([str(base / "o"), "--prompt", "All:", "--max-new-tokens", "8", "--temperature", "0"]) == 0
    adapted_text = capsys.readouterr().out
    assert export_merged.main([str(base / "o"), str(base / "merged")]) == 0
    assert "the adapters merged into the weights" in capsys.readouterr().out
    assert sample.main([str(base / "merged"), "--prompt", "All:", "--max-new-tokens", "8", "--temperature", "0"]) == 0
    assert capsys.readouterr().out == adapted_text
    adapted, tokenizer = checkpoint.load_model(base / "o")
    merged, _ = checkpoint.load_model(base / "merged")
    ids = np.array([tokenizer.encode("Speak, speak.")])
    np.testing.assert_allclose(merged(ids)[0].data, adapted(ids)[0].data, rtol=1e-5, atol=1e-6)
    with pytest.raises(SystemExit):
        export_merged.main([str(base / "o"), str(base / "merged")])  # never into a folder that is there
    assert "exists; give a new folder" in capsys.readouterr().err


@pytest.mark.interop
def test_transformers_loads_the_merged_export_with_the_same_logits(base, capsys):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    lora_run(capsys, base, base / "o", "--max-iters", "4")
    assert export_merged.main([str(base / "o"), str(base / "merged")]) == 0
    adapted, tokenizer = checkpoint.load_model(base / "o")
    ids = np.array([tokenizer.encode("Before we")])  # within the 16 positions the run cropped to
    hf = transformers.GPT2LMHeadModel.from_pretrained(base / "merged")
    np.testing.assert_allclose(hf(torch.tensor(ids)).logits.detach().numpy(), adapted(ids)[0].data,
                               rtol=1e-4, atol=1e-5)
    assert transformers.AutoTokenizer.from_pretrained(base / "merged")("All:")["input_ids"] == tokenizer.encode("All:")


def test_adapters_whose_base_changed_or_went_are_refused_in_one_line(base, capsys):
    lora_run(capsys, base, base / "o", "--max-iters", "2")
    with ag.seeded(1):
        GPT(GPTConfig(vocab_size=CharTokenizer(TEXT).vocab_size, block_size=32, n_layer=2, n_head=2,
                      n_embd=16)).save_pretrained(base / "other")
    (base / "base" / "model.safetensors").write_bytes((base / "other" / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match=r"adapter_config.json adapts .*base with SHA-256 \w+…, but the folder "
                                         r"there now holds other weights"):
        checkpoint.load_model(base / "o")
    (base / "base" / "config.json").unlink()
    assert sample.main([str(base / "o")]) == 1
    assert "which is not there" in capsys.readouterr().err


def test_lora_needs_a_model_to_adapt(tmp_path, capsys):
    with pytest.raises(SystemExit):
        train.main([*RUN, "--lora-r", "4", "--out-dir", str(tmp_path / "o")])
    assert "--lora-r 4 adapts a trained model: give it one with --init-from DIR" in capsys.readouterr().err


def test_adapters_cannot_be_saved_over_their_own_base(base, capsys):
    """--init-from X --out-dir X --overwrite replaced X with adapters that name X as their base: the base weights
    were gone, and the checkpoint could be neither resumed nor sampled."""
    before = sorted(p.name for p in (base / "base").iterdir())
    with pytest.raises(SystemExit) as exit_info:
        train.main([*RUN, "--data", str(base / "text.txt"), "--init-from", str(base / "base"), "--lora-r", "2",
                    "--out-dir", f"{base / 'base'}/.", "--overwrite", "--max-iters", "2"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        f"python -m models.train: error: --lora-r 2 saves the adapters alone, which need their base --init-from "
        f"{base / 'base'}, and --out-dir {base / 'base'}/. is that folder, which a save replaces; give the "
        "checkpoints another --out-dir (see --help)\n")
    assert sorted(p.name for p in (base / "base").iterdir()) == before
    # a full fine-tune keeps no link to its base, so it may still replace the folder it started from
    assert train.main([*RUN, "--data", str(base / "text.txt"), "--init-from", str(base / "base"), "--max-iters", "2",
                       "--out-dir", str(base / "base"), "--overwrite"]) == 0
    assert checkpoint.saved_iteration(base / "base") == 2


@pytest.mark.skipif(os.name != "posix", reason="flock is POSIX's")
def test_adapters_of_a_base_that_a_run_is_still_writing_are_refused(base, capsys):
    """Adapters record their base's SHA-256: trained on a folder that another run saves into, they named weights
    that were gone at its next save, and export_merged refused them ("the folder there now holds other weights")."""
    with checkpoint.writer_lock(base / "base"):
        with pytest.raises(SystemExit) as exit_info:
            train.main([*RUN, "--data", str(base / "text.txt"), "--init-from", str(base / "base"), "--lora-r", "2",
                        "--out-dir", str(base / "lora"), "--max-iters", "2"])
        assert exit_info.value.code == 2
        assert capsys.readouterr().err == (
            f"python -m models.train: error: --init-from {base / 'base'} is being written by another training run "
            f"(process {os.getpid()}), whose next save replaces the weights that --lora-r 2's adapters are trained "
            "on; wait for it to end, or adapt a copy of the folder (see --help)\n")
        assert not (base / "lora").exists()
    lora_run(capsys, base, base / "lora", "--max-iters", "2")  # the run over, its folder is a base again


def test_checkpointed_blocks_train_the_very_same_run(base, capsys):
    histories = []
    for flag, folder in (([], "plain"), (["--checkpoint-blocks"], "checked")):
        assert train.main([*RUN, "--data", str(base / "text.txt"), "--n-embd", "16", "--n-head", "2", "--dropout",
                           "0.1", "--max-iters", "4", "--out-dir", str(base / folder), *flag]) == 0
        histories.append(json.loads((base / folder / "train_state.json").read_text())["history"])
    capsys.readouterr()
    assert histories[0] == histories[1]
    plain, checked = (load_file(str(base / f / "model.safetensors")) for f in ("plain", "checked"))
    assert all(np.array_equal(plain[k], checked[k]) for k in plain)


def test_the_merged_export_keeps_the_bases_context(base, capsys):
    lora_run(capsys, base, base / "o", "--max-iters", "2")  # trained on blocks of 16, the base has 32 positions
    assert export_merged.main([str(base / "o"), str(base / "merged")]) == 0
    assert "context 32 tokens" in capsys.readouterr().out
    config = json.loads((base / "merged" / "config.json").read_text())
    assert config["n_positions"] == 32
    merged, based = GPT.from_pretrained(base / "merged"), GPT.from_pretrained(base / "base")
    assert merged.num_parameters() == based.num_parameters()
    np.testing.assert_array_equal(merged.transformer.wpe.weight.data, based.transformer.wpe.weight.data)


def test_a_lora_checkpoint_samples_past_its_training_blocks_as_its_merged_export_does(base, capsys):
    """Trained on blocks of 16, the adapted model keeps the base's 32 positions, as its export does: the two sample
    the same tokens for the same seed past the 16th (the checkpoint once cropped its context to 16 on loading)."""
    lora_run(capsys, base, base / "o", "--max-iters", "2", "--lora-alpha", "5", "--lora-targets", "c_attn,c_proj,c_fc")
    assert export_merged.main([str(base / "o"), str(base / "merged")]) == 0
    capsys.readouterr()
    texts = []
    for folder in ("o", "merged"):  # 4 + 40 tokens: the window slides past 32 too
        assert sample.main([str(base / folder), "--prompt", "All:", "--max-new-tokens", "40", "--seed", "3"]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1]
    adapted, tokenizer = checkpoint.load_model(base / "o")
    merged, _ = checkpoint.load_model(base / "merged")
    assert adapted.config.block_size == merged.config.block_size == 32
    ids = np.array([tokenizer.encode(TEXT[:32])])
    np.testing.assert_allclose(merged(ids)[0].data, adapted(ids)[0].data, rtol=1e-5, atol=1e-6)


def test_a_checkpoint_without_adapters_is_exported_as_a_copy_and_says_so(base, capsys):
    assert train.main([*RUN, "--data", str(base / "text.txt"), "--n-embd", "16", "--n-head", "2", "--max-iters", "2",
                       "--out-dir", str(base / "plain")]) == 0
    capsys.readouterr()
    assert export_merged.main([str(base / "plain"), str(base / "copy")]) == 0
    out = capsys.readouterr().out
    assert out.endswith("context 16 tokens, no adapters: copied as is\n") and "merged" not in out
    copied, trained = (load_file(str(base / f / "model.safetensors")) for f in ("copy", "plain"))
    assert all(np.array_equal(copied[k], trained[k]) for k in trained)


def test_init_from_a_lora_checkpoint_says_its_adapters_train_on_and_leaves_the_base_as_it_was(base, capsys):
    """Without --lora-r (a full fine-tune, its help says) a LoRA checkpoint's adapters trained on without a word."""
    lora_run(capsys, base, base / "o", "--max-iters", "2")
    assert train.main([*RUN, "--data", str(base / "text.txt"), "--init-from", str(base / "o"), "--max-iters", "2",
                       "--out-dir", str(base / "more")]) == 0
    out = capsys.readouterr().out
    assert (f"lora: {base / 'o'} holds rank 2 adapters (c_attn, c_fc), which train on with their base frozen; "
            "576 of 8,160 parameters train (to fine-tune them all, merge the adapters first: "
            "python -m models.export_merged)") in out, out
    config = json.loads((base / "more" / "adapter_config.json").read_text())
    assert config["folder"] == str((base / "base").resolve())  # the adapters' own base, not the checkpoint
    assert config["sha256"] == checkpoint.fingerprint(base / "base")
    before, after = (load_file(str(base / f / "adapters.safetensors")) for f in ("o", "more"))
    assert sorted(before) == sorted(after) and any(not np.array_equal(before[k], after[k]) for k in before)


def test_lora_targets_that_name_a_layer_twice_are_refused_as_they_are_parsed(tmp_path, capsys):
    """c_attn,c_fc,c_attn trained, printed "adapters in … layers (c_attn, c_fc, c_attn)" and saved the repeat."""
    with pytest.raises(SystemExit) as exit_info:
        train.main([*RUN, "--lora-r", "2", "--lora-targets", "c_attn,c_fc,c_attn", "--out-dir", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "python -m models.train: error: argument --lora-targets: 'c_attn' named more than once in "
        "'c_attn,c_fc,c_attn'; give each layer name once (see --help)\n")


def test_an_alpha_whose_scale_float32_cannot_hold_is_one_line_and_no_checkpoint(base, capsys):
    """--lora-alpha 1e39 with --lora-r 2 stopped with "the loss became nan at iteration 0 … try a smaller --lr"."""
    assert train.main([*RUN, "--data", str(base / "text.txt"), "--init-from", str(base / "base"), "--lora-r", "2",
                       "--lora-alpha", "1e39", "--max-iters", "2", "--out-dir", str(base / "o")]) == 1
    assert capsys.readouterr().err == (
        "train: error: LoRALinear: the scale alpha/r = 1e+39/2 = 5e+38 rounds to inf in the layer's float32 weights; "
        "give an alpha for which alpha/r lies in [1.4e-45, 3.4e+38]\n")
    assert not (base / "o").exists()


def test_a_block_size_beyond_a_lora_checkpoints_base_is_refused_at_parse_time(base, capsys, monkeypatch):
    """The adapters' checkpoint has no config.json of its own: --init-from of it was checked against nothing until
    its base's weights and the text had loaded (and a "lora:" line was printed)."""
    lora_run(capsys, base, base / "run", "--max-iters", "2")
    monkeypatch.setattr(train, "load_text", lambda *a: pytest.fail("the text was read before the refusal"))
    monkeypatch.setattr(checkpoint, "load_weights", lambda *a, **k: pytest.fail("the model loaded before the refusal"))
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--init-from", str(base / "run"), "--block-size", "64", "--out-dir", str(base / "o")])
    assert exit_info.value.code == 2
    assert capsys.readouterr() == ("", f"python -m models.train: error: --block-size 64 exceeds the 32 positions of "
                                       f"the model in --init-from {base / 'run'}; use --block-size 32 or less "
                                       "(see --help)\n")
