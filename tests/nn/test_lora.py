"""nn.LoRALinear and nn.lora: the base at step 0, gradients against finite differences and PyTorch, merge = unmerged."""
import copy
import re

import numpy as np
import pytest

import autograd as ag
import nn
from autograd import Tensor
from models.gpt.gpt2 import GPT, LINEAR_LAYERS, GPTConfig

TINY = GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=8)


def tiny_gpt(seed=0):
    with ag.seeded(seed):
        return GPT(TINY)


def batch(seed=1):
    x = np.random.default_rng(seed).integers(0, 16, size=(3, 9))
    return x[:, :-1], x[:, 1:]


def test_at_step_0_the_adapted_model_is_the_base_exactly():
    base, adapted = tiny_gpt(), tiny_gpt()
    replaced = nn.lora(adapted, r=2, alpha=4, targets=("c_attn", "c_proj"))
    assert replaced == [f"transformer.h.{i}.{m}" for i in range(2)
                        for m in ("attn.c_attn", "attn.c_proj", "mlp.c_proj")]
    x, y = batch()
    np.testing.assert_array_equal(adapted(x, y)[0].data, base(x, y)[0].data)
    assert set(base.state_dict()) < set(adapted.state_dict())  # the base's keys, plus lora_A/lora_B


def test_only_the_adapters_train_and_the_optimizer_holds_moments_for_them_alone():
    model = tiny_gpt()
    nn.lora(model, r=2, alpha=2, targets="c_attn")
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable == [f"transformer.h.{i}.attn.c_attn.lora_{ab}" for i in range(2) for ab in "AB"]
    optimizer = nn.optim.AdamW(model.optimizer_groups(0.1), lr=1e-2)
    frozen = {n: p.data.copy() for n, p in model.named_parameters() if not p.requires_grad}
    x, y = batch()
    for _ in range(2):
        _, loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert all(np.array_equal(p.data, frozen[n]) for n, p in model.named_parameters() if n in frozen)
    assert not np.array_equal(model.transformer.h[0].attn.c_attn.lora_B.data, 0)
    assert sum(b.size for s in optimizer.state_dict()["state"].values() for k, b in s.items() if k != "step") == \
        2 * sum(model.state_dict()[n].size for n in trainable)


def test_the_gradients_of_a_lora_layer_match_finite_differences():
    ag.manual_seed(3)
    layer = nn.LoRALinear(nn.Linear(4, 3), r=2, alpha=3.0)
    for p in (layer.weight, layer.bias, layer.lora_A, layer.lora_B):
        p.data = p.data.astype(np.float64)
    layer.lora_B.data = np.random.default_rng(0).standard_normal((2, 3))  # nonzero: every path carries gradient
    x = Tensor(np.random.default_rng(1).standard_normal((5, 4)), requires_grad=True)

    def loss(x, a, b):
        layer.lora_A, layer.lora_B = a, b
        return (layer(x) ** 2).sum()

    ag.gradcheck(loss, [x, layer.lora_A, layer.lora_B])


def merge_all(model):
    """Merge every LoRA layer of `model`; returns the layers and their base weights from before."""
    layers = [m for m in model.modules() if isinstance(m, nn.LoRALinear)]
    base_weights = [m.weight.data.copy() for m in layers]
    for m in layers:
        m.merge()
    return layers, base_weights


def test_merged_equals_unmerged_and_unmerge_restores_the_base_weight_exactly():
    model = adapted_gpt()
    x, y = batch()
    unmerged = model(x, y)[0].data
    layers, base_weights = merge_all(model)
    np.testing.assert_allclose(model(x, y)[0].data, unmerged, rtol=1e-5, atol=1e-6)
    for m, w in zip(layers, base_weights):
        m.unmerge()
        np.testing.assert_array_equal(m.weight.data, w)
    np.testing.assert_array_equal(model(x, y)[0].data, unmerged)


def test_a_merged_model_cast_to_float64_unmerges_to_its_base_in_float64():
    # the only cast a model has is each parameter's .data (Module.to takes a device): the base kept aside by
    # merge() came back in float32 beside float64 adapters and bias
    model = adapted_gpt()
    cast = copy.deepcopy(model)  # cast as it is, unmerged
    for p in cast.parameters():
        p.data = p.data.astype(np.float64)
    layers, base_weights = merge_all(model)
    model.to("cpu")
    for p in model.parameters():
        p.data = p.data.astype(np.float64)
    for m, w in zip(layers, base_weights):
        m.unmerge()
        assert m.weight.dtype == np.float64
        np.testing.assert_array_equal(m.weight.data, w.astype(np.float64))
    x, y = batch()
    np.testing.assert_array_equal(model(x, y)[0].data, cast(x, y)[0].data)


def test_a_merged_model_moved_to_a_device_unmerges_there(device):
    from autograd import backend
    model = adapted_gpt()
    x, y = batch()
    unmerged = model(x, y)[0].data
    layers, base_weights = merge_all(model)
    model.to(device)
    for m, w in zip(layers, base_weights):
        m.unmerge()
        assert m.weight.device == device  # the base was kept on the CPU, where merge() found it
        np.testing.assert_array_equal(backend.to_host(m.weight.data), w)
    logits = model(ag.Tensor(x, device=device), ag.Tensor(y, device=device))[0]
    np.testing.assert_allclose(backend.to_host(logits.data), unmerged, atol=1e-4)  # as test_devices compares GPTs


def test_merge_twice_and_unmerge_unmerged_change_nothing():
    model = adapted_gpt()
    layer = model.transformer.h[0].attn.c_attn
    base = layer.weight.data.copy()
    layer.unmerge()
    np.testing.assert_array_equal(layer.weight.data, base)
    merged = layer.merge().weight.data.copy()
    np.testing.assert_array_equal(layer.merge().weight.data, merged)
    np.testing.assert_array_equal(layer.unmerge().unmerge().weight.data, base)


def test_load_state_dict_into_a_merged_model_is_refused_and_changes_nothing_and_after_unmerge_it_loads_exactly():
    """It loaded, and unmerge() then put back the base kept from before: the loaded weight was thrown away."""
    model, source = adapted_gpt(), tiny_gpt(seed=5)
    nn.lora(source, r=2, alpha=4, targets=("c_attn", "c_fc"))
    loaded = {n: a.copy() for n, a in source.state_dict().items()}
    layers, _ = merge_all(model)
    before = {n: p.data.copy() for n, p in model.named_parameters()}
    with pytest.raises(RuntimeError, match=r"load_state_dict into GPT: transformer\.h\.0\.attn\.c_attn, "
                       r"transformer\.h\.0\.mlp\.c_fc, transformer\.h\.1\.attn\.c_attn and 1 more: merged LoRA "
                       r"\(merge\(\)\).*call unmerge\(\) first"):
        model.load_state_dict(loaded)
    with pytest.raises(RuntimeError, match="merged LoRA"):  # the adapters alone, as a checkpoint's are loaded
        model.load_state_dict({n: a for n, a in loaded.items() if ".lora_" in n}, strict=False)
    assert all(np.array_equal(p.data, before[n]) for n, p in model.named_parameters())
    for m in layers:
        m.unmerge()
    model.load_state_dict(loaded)
    for m in layers:
        m.merge().unmerge()
    assert all(np.array_equal(p.data, loaded[n]) for n, p in model.named_parameters())


def test_state_dict_of_a_merged_model_is_refused_and_an_unmerged_ones_loads_into_a_copy_exactly():
    """A merged state dict held W + ΔW beside lora_A and lora_B: an unmerged copy loading it added ΔW twice."""
    model, copy_ = adapted_gpt(), tiny_gpt(seed=5)
    nn.lora(copy_, r=2, alpha=4, targets=("c_attn", "c_fc"))
    layer = model.transformer.h[1].mlp.c_fc.merge()
    with pytest.raises(RuntimeError, match=r"state_dict of GPT: transformer\.h\.1\.mlp\.c_fc: merged LoRA"):
        model.state_dict()
    with pytest.raises(RuntimeError, match=r"state_dict of LoRALinear: LoRALinear: merged LoRA"):
        layer.state_dict()
    layer.unmerge()
    copy_.load_state_dict(model.state_dict())
    x, y = batch()
    np.testing.assert_array_equal(copy_(x, y)[0].data, model(x, y)[0].data)


def test_a_second_lora_call_adds_adapters_and_the_first_calls_train_on():
    """The second call froze every parameter but its own adapters: c_attn's stopped training without a word."""
    model = tiny_gpt()
    nn.lora(model, r=2, alpha=4, targets="c_attn")
    nn.lora(model, r=2, alpha=4, targets="c_fc")
    assert [n for n, p in model.named_parameters() if p.requires_grad] == [
        f"transformer.h.{i}.{m}.lora_{ab}" for i in range(2) for m in ("attn.c_attn", "mlp.c_fc") for ab in "AB"]
    together = tiny_gpt()
    nn.lora(together, r=2, alpha=4, targets=("c_attn", "c_fc"))
    assert [n for n, p in together.named_parameters() if p.requires_grad] == \
        [n for n, p in model.named_parameters() if p.requires_grad]


def test_lora_on_a_layer_adapted_already_says_so_and_changes_nothing():
    """It said "no nn.Linear named 'c_attn' in GPT" of a model whose c_attn layers were there, adapted by a first call."""
    model = tiny_gpt()
    nn.lora(model, r=2, alpha=4, targets="c_attn")
    before = [(n, p.requires_grad) for n, p in model.named_parameters()]
    with pytest.raises(ValueError, match=r"^lora: the 'c_attn' layers of GPT are adapted already \(nn.LoRALinear\); "
                                         r"leave them out of targets \(their adapters train on\), or adapt a fresh "
                                         r"copy of the base model for another rank or alpha$"):
        nn.lora(model, r=4, alpha=4, targets=("c_fc", "c_attn"))
    assert [(n, p.requires_grad) for n, p in model.named_parameters()] == before


def test_numpy_integers_and_floats_are_a_rank_and_an_alpha_as_python_ones_are():
    """np.int64(2) was refused as "r must be an integer", and np.float32 as "alpha must be a positive number"."""
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    layers = []
    for r, alpha in ((2, 3.0), (np.int64(2), np.float32(3.0))):
        ag.manual_seed(0)
        layer = nn.LoRALinear(nn.Linear(4, 3), r=r, alpha=alpha)
        layer.lora_B.data = np.ones((2, 3), np.float32)
        layers.append(layer)
    plain, numpy = layers
    assert numpy.r == 2 and type(numpy.r) is int and numpy.scale == 1.5 and type(numpy.scale) is float
    np.testing.assert_array_equal(numpy(Tensor(x)).data, plain(Tensor(x)).data)


def test_the_linear_layers_a_run_may_adapt_are_the_models():
    names = {name.rsplit(".", 1)[-1] for name, m in tiny_gpt().named_modules() if isinstance(m, nn.Linear)}
    assert names == set(LINEAR_LAYERS)


def adapted_gpt():
    """A tiny GPT whose c_attn and c_fc adapters are nonzero, so that the adapted model is not its base."""
    model = tiny_gpt()
    nn.lora(model, r=2, alpha=4, targets=("c_attn", "c_fc"))
    for name, p in model.named_parameters():
        if name.endswith("lora_B"):
            p.data = np.random.default_rng(len(name)).standard_normal(p.shape).astype(p.dtype)
    return model


@pytest.mark.parametrize("merge", [False, True])
def test_save_pretrained_of_an_adapted_model_writes_the_function_it_computes(tmp_path, merge):
    """It wrote the base weights beside lora_A/lora_B keys: from_pretrained refused the folder, and transformers
    dropped the adapters and gave the base's logits."""
    from safetensors.numpy import load_file
    model = adapted_gpt()
    x, _ = batch()
    adapted = model(x)[0].data
    layers = [m for m in model.modules() if isinstance(m, nn.LoRALinear)]
    if merge:
        for m in layers:
            m.merge()
    weights = {n: p.data.copy() for n, p in model.named_parameters()}
    model.save_pretrained(tmp_path / "saved")
    assert sorted(load_file(str(tmp_path / "saved" / "model.safetensors"))) == sorted(tiny_gpt().state_dict())
    np.testing.assert_allclose(GPT.from_pretrained(tmp_path / "saved")(x)[0].data, adapted, rtol=1e-5, atol=1e-6)
    assert all(np.array_equal(p.data, weights[n]) for n, p in model.named_parameters())  # the model as it was
    assert all(m.merged == merge for m in layers)


@pytest.mark.interop
def test_transformers_loads_an_adapted_models_save_pretrained_with_its_logits(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = adapted_gpt()
    x, _ = batch()
    model.save_pretrained(tmp_path / "saved")
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "saved")
    np.testing.assert_allclose(hf(torch.tensor(x)).logits.detach().numpy(), model(x)[0].data, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("call, message", [
    (lambda: nn.LoRALinear(nn.Linear(4, 3), r=0, alpha=1), "r must be an integer in [1, 3]"),
    (lambda: nn.LoRALinear(nn.Linear(4, 3), r=2, alpha=-1), "alpha must be a positive number"),
    (lambda: nn.LoRALinear(nn.Embedding(4, 3), r=1, alpha=1), "wraps an nn.Linear"),
    (lambda: nn.LoRALinear(type("Linear", (), {"__module__": "torch.nn.modules.linear"})(), r=1, alpha=1),
     "LoRALinear: wraps an nn.Linear, got torch.nn.modules.linear.Linear"),  # was "got Linear"
    (lambda: nn.lora(tiny_gpt(), 2, 2, ["c_atn"]), "no nn.Linear named 'c_atn' in GPT"),
    (lambda: nn.lora(tiny_gpt(), 2, 2, []), "targets is empty"),
    (lambda: nn.lora(tiny_gpt(), 2, 2, None), "targets are attribute names of Linear layers, a str or a list of "
                                              "them such as ('c_attn',); got None"),
    (lambda: nn.lora(tiny_gpt(), 2, 2, ["c_attn", 1]), "got ['c_attn', 1]"),
    (lambda: nn.LoRALinear(nn.Linear(4, 3), r=True, alpha=1), "r must be an integer in [1, 3]"),
    (lambda: nn.LoRALinear(nn.Linear(4, 3), r=np.float64(2), alpha=1), "r must be an integer in [1, 3]"),
    (lambda: nn.LoRALinear(nn.Linear(4, 3), r=2, alpha=np.float32("inf")), "alpha must be a positive number"),
    # a float32 scale of inf made NaN of step 0's B = 0; one of 0 left every adapter gradient 0, so nothing trained
    (lambda: nn.LoRALinear(nn.Linear(4, 3), r=2, alpha=1e39), "LoRALinear: the scale alpha/r = 1e+39/2 = 5e+38 rounds "
                                                             "to inf in the layer's float32 weights; give an alpha for "
                                                             "which alpha/r lies in [1.4e-45, 3.4e+38]"),
    (lambda: nn.LoRALinear(nn.Linear(4, 3), r=2, alpha=1e-50), "alpha/r = 1e-50/2 = 5e-51 rounds to 0 in the layer's "
                                                              "float32 weights"),
])
def test_bad_arguments_are_one_clear_line(call, message):
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        call()


def test_the_scales_bounds_are_those_of_the_weights_dtype():
    """alpha/r = 5e+38, inf in float32, is a float64 number: a float64 layer takes it, and is its base at step 0."""
    base = nn.Linear(4, 3)
    base.weight.data, base.bias.data = base.weight.data.astype(np.float64), base.bias.data.astype(np.float64)
    layer = nn.LoRALinear(base, r=2, alpha=1e39)
    x = Tensor(np.random.default_rng(0).standard_normal((5, 4)))
    np.testing.assert_array_equal(layer(x).data, base(x).data)
    layer.lora_B.data = np.full((2, 3), 1e-40)
    np.testing.assert_allclose(layer(x).data, base(x).data + 5e-2 * (x.data @ layer.lora_A.data).sum(1, keepdims=True),
                               rtol=1e-12)


@pytest.mark.interop
def test_against_pytorch_the_same_lora_gives_the_same_gradients():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w, b, a, bb, x = (rng.standard_normal(s) for s in [(4, 3), (3,), (4, 2), (2, 3), (5, 4)])
    layer = nn.LoRALinear(nn.Linear(4, 3), r=2, alpha=6.0)
    layer.weight.data, layer.bias.data, layer.lora_A.data, layer.lora_B.data = w, b, a.copy(), bb.copy()
    xt = Tensor(x, requires_grad=True)
    (layer(xt).tanh().sum()).backward()
    tw, tb, ta, tbb, tx = (torch.tensor(v, requires_grad=True) for v in (w, b, a, bb, x))
    ((tx @ tw + tb + (tx @ ta) @ tbb * 3.0).tanh().sum()).backward()
    np.testing.assert_allclose(layer.lora_A.grad, ta.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(layer.lora_B.grad, tbb.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(xt.grad, tx.grad.numpy(), rtol=1e-12)
