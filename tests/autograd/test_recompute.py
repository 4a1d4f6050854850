"""ag.checkpoint: activations recomputed in backward, bit for bit the unchecked pass, dropout included."""
import numpy as np
import pytest

import autograd as ag
import nn
from autograd import Tensor
from models.gpt.gpt2 import GPT, GPTConfig

from ._helpers import while_another_thread_pauses


def gpt_step(checkpoint_blocks, grad_accum=1):
    """Loss, every gradient and the random stream after a training step of a tiny GPT with dropout."""
    ag.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=8, dropout=0.2))
    model.transformer.checkpoint_blocks = checkpoint_blocks
    x = np.random.default_rng(0).integers(0, 16, size=(3, 9))
    losses = []
    for _ in range(grad_accum):
        _, loss = model(x[:, :-1], x[:, 1:])
        (loss / grad_accum).backward()
        losses.append(loss.item())
    return losses, {n: p.grad.copy() for n, p in model.named_parameters()}, ag.get_rng_state()


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_checkpointed_blocks_give_the_same_loss_gradients_and_random_stream_bit_for_bit(grad_accum):
    plain, checked = gpt_step(False, grad_accum), gpt_step(True, grad_accum)
    assert plain[0] == checked[0]
    assert plain[1].keys() == checked[1].keys()
    for name in plain[1]:
        np.testing.assert_array_equal(plain[1][name], checked[1][name], err_msg=name)
    assert plain[2] == checked[2]  # dropout drew its masks once from the live stream, as without checkpointing


def test_a_frozen_model_with_lora_adapters_checkpoints_its_blocks_bit_for_bit():
    import nn
    results = []
    for checkpoint_blocks in (False, True):
        ag.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=8, dropout=0.1))
        nn.lora(model, 2, 4, ["c_attn"])
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data + 0.1  # B nonzero: every adapter path carries gradient
        model.transformer.checkpoint_blocks = checkpoint_blocks
        x = np.random.default_rng(0).integers(0, 16, size=(3, 9))
        _, loss = model(x[:, :-1], x[:, 1:])  # the embeddings are frozen: no block input requires grad
        loss.backward()
        results.append({n: p.grad.copy() for n, p in model.named_parameters() if p.requires_grad})
    assert results[0].keys() == results[1].keys() and len(results[0]) == 4
    for name in results[0]:
        np.testing.assert_array_equal(results[0][name], results[1][name], err_msg=name)


def test_the_checkpointed_op_keeps_only_its_inputs():
    w = Tensor(np.random.default_rng(0).standard_normal((4, 4)), requires_grad=True)
    x = Tensor(np.random.default_rng(1).standard_normal((2, 4)), requires_grad=True)
    y = ag.checkpoint(lambda h: (h @ w).tanh() @ w, x)
    assert y.op.name == "Checkpoint" and y.op.inputs == (x,)
    assert ag.topological_order(y) == [y, x]  # nothing of fn's graph is recorded


def test_gradients_through_a_checkpoint_match_finite_differences():
    rng = np.random.default_rng(2)
    x, w = (Tensor(rng.standard_normal(s), requires_grad=True) for s in [(3, 4), (4, 4)])
    ag.gradcheck(lambda x, w: ag.checkpoint(lambda h, v: ((h @ v).gelu() @ v).sum(axis=0), x, w).sum(), [x, w])


def test_parameters_read_inside_fn_get_their_gradients():
    rng = np.random.default_rng(3)
    w = Tensor(rng.standard_normal((4, 3)), requires_grad=True)
    x = Tensor(rng.standard_normal((2, 4)), requires_grad=True)
    (x @ w).sigmoid().sum().backward()
    expected_w, expected_x = w.grad.copy(), x.grad.copy()
    w.grad = x.grad = None
    ag.checkpoint(lambda h: (h @ w).sigmoid(), x).sum().backward()
    np.testing.assert_array_equal(w.grad, expected_w)
    np.testing.assert_array_equal(x.grad, expected_x)


def closing_over(dtype, checkpointed):
    """loss(w, x, v) of fn(x) = tanh(x @ h) * v, with fn closing over h = tanh(w), an activation that also feeds
    the loss beside fn, and over the leaf v; with `checkpointed`, fn runs under ag.checkpoint."""
    def loss(w, x, v):
        h = w.tanh()
        fn = lambda t: (t @ h).tanh() * v  # noqa: E731
        return (ag.checkpoint(fn, x) if checkpointed else fn(x)).sum() + (h * 3.0).sum()
    rng = np.random.default_rng(4)
    return loss, [Tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in [(3, 3), (2, 3), (3,)]]


def test_an_activation_fn_closes_over_gets_its_gradient_once_beside_its_other_uses():
    """h = tanh(w) read inside fn and outside it, which backward refused ("pass it to checkpoint as an input"): its
    gradient is the sum of both uses', fn's added by the outer pass, which alone goes through Tanh."""
    loss, inputs = closing_over(np.float64, True)
    ag.gradcheck(loss, inputs)
    (plain, ins), (checked, outs) = closing_over(np.float32, False), closing_over(np.float32, True)
    plain(*ins).backward()
    checked(*outs).backward()
    for a, b in zip(ins, outs):
        np.testing.assert_array_equal(a.grad, b.grad)


def read_twice_and_passed_too(w, x):
    h = w.tanh()
    return ag.checkpoint(lambda t, k: ((t @ h).tanh() @ h + k).sum(axis=1), x, h[0]).sum()


def read_by_a_checkpoint_inside(w, x):
    """The outer recompute puts its stand-in for h among the inner op's inputs, where the inner fn still reads h."""
    h = w.sigmoid()
    return ag.checkpoint(lambda t: ag.checkpoint(lambda u: (u @ h).tanh(), t * 2.0) @ h, x).sum()


@pytest.mark.parametrize("loss", [read_twice_and_passed_too, read_by_a_checkpoint_inside])
def test_every_read_of_a_closed_over_activation_gets_its_part(loss):
    rng = np.random.default_rng(5)
    ag.gradcheck(loss, [Tensor(rng.standard_normal(s), requires_grad=True) for s in [(3, 3), (2, 3)]])


def test_a_closed_over_activation_is_an_input_of_the_op_and_fn_records_nothing():
    w = Tensor(np.random.default_rng(7).standard_normal((4, 4)), requires_grad=True)
    x = Tensor(np.random.default_rng(8).standard_normal((2, 4)), requires_grad=True)
    h = w.tanh()
    y = ag.checkpoint(lambda t: ((t @ h).tanh() @ h).exp(), x)
    assert y.op.inputs == (x, h) and y.op.needs_grad == (True, True)
    assert ag.topological_order(y) == [y, x, h, w]  # nothing of fn's graph is recorded


def test_a_closed_over_activation_keeps_retain_graph_as_without_checkpoint():
    loss, inputs = closing_over(np.float32, True)
    out = loss(*inputs)
    out.backward(retain_graph=True)
    once = [t.grad.copy() for t in inputs]
    out.backward()
    for t, g in zip(inputs, once):
        np.testing.assert_array_equal(t.grad, 2 * g)
    with pytest.raises(RuntimeError, match=r"^backward: the graph through Add was freed by an earlier backward\(\)"):
        out.backward()


def test_an_activation_the_recompute_reads_but_the_forward_did_not_is_refused():
    w = Tensor(np.ones((3, 3)), requires_grad=True)
    read = {"h": w.tanh()}
    loss = ag.checkpoint(lambda t: t @ read["h"], Tensor(np.ones((2, 3)), requires_grad=True)).sum()
    read["h"] = w.exp()
    with pytest.raises(RuntimeError, match=r"^backward: Checkpoint: fn's recompute reads a tensor \(shape \(3, 3\), "
                                           r"made by Exp outside fn\) that requires grad, which its forward did not "
                                           r"read, .* pass this one to checkpoint as an input"):
        loss.backward()


def test_misuse_is_one_clear_line():
    x = Tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="no input requires grad"):
        ag.checkpoint(lambda h: h * 2, x)
    a = Tensor([1.0, 2.0], requires_grad=True) * 2.0  # the only way to a gradient is an activation fn closes over
    with pytest.raises(ValueError, match=r"an activation it closes over\); pass the activations it reads as inputs, "
                                         r"checkpoint\(fn, x, it\)"):
        ag.checkpoint(lambda h: h * a, x)
    with pytest.raises(TypeError, match="fn must return one Tensor"):
        ag.checkpoint(lambda h: [h], Tensor([1.0], requires_grad=True))
    with pytest.raises(TypeError, match="pass fn and the Tensors"):
        ag.checkpoint(lambda h: h, [1.0])
    with ag.no_grad():
        assert ag.checkpoint(lambda h: h * 2, x).tolist() == [2.0, 4.0]  # nothing to recompute: fn runs plainly


def test_a_backward_run_inside_no_grad_still_reaches_through_the_checkpoint():
    """The recompute followed the caller's mode: under no_grad() it recorded nothing and no gradient came out."""
    block = nn.Linear(3, 3)
    x = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    ag.checkpoint(block, x).sum().backward()
    expected = x.grad.copy(), block.weight.grad.copy()
    x.grad = block.weight.grad = block.bias.grad = None
    loss = ag.checkpoint(block, x).sum()
    with ag.no_grad():
        loss.backward()
    np.testing.assert_array_equal(x.grad, expected[0])
    np.testing.assert_array_equal(block.weight.grad, expected[1])


def test_ag_grad_through_a_checkpoint_is_refused_rather_than_writing_grad():
    """ag.grad writes no .grad; the checkpoint's backward adds into its parameters' .grad, so it says so."""
    block = nn.Linear(3, 3)
    x = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    with pytest.raises(RuntimeError, match=r"^checkpoint: its backward adds the gradients of fn's parameters into "
                                           r"their \.grad"):
        ag.grad(ag.checkpoint(block, x).sum(), [x])
    assert block.weight.grad is None


def test_ag_grad_in_another_thread_does_not_refuse_this_threads_checkpoint():
    """ag.grad's 'no .grad written' was the process's: a backward here through a checkpoint, while another thread's
    ag.grad walked its own graph, was refused as if it were that ag.grad."""
    class Pause(ag.Function):
        def forward(self, a):
            return a * 2

        def backward(self, g):
            self.pause()
            return (2 * g,)

    def hold(pause):
        Pause.pause = staticmethod(pause)
        w = Tensor(np.array([3.0]), requires_grad=True)
        assert ag.grad(Pause.apply(w).sum(), [w])[0].tolist() == [2.0]

    block = nn.Linear(3, 3)
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    block(x).sum().backward()
    expected = block.weight.grad.copy(), x.grad.copy()
    block.zero_grad()
    x.grad = None
    while_another_thread_pauses(hold, lambda: ag.checkpoint(block, x).sum().backward())
    np.testing.assert_array_equal(block.weight.grad, expected[0])
    np.testing.assert_array_equal(x.grad, expected[1])
