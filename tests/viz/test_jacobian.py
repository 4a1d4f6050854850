"""viz.jacobian: each op's heatmap is ag.jacobian's matrix, beside a closed form that agrees with it."""
import os
import stat
from pathlib import Path

import numpy as np
import pytest

import autograd as ag
from viz import jacobian as vj

from tests.autograd._helpers import PNG, drawn_matrices


@pytest.mark.parametrize("name", list(vj.OPS))
def test_each_ops_heatmap_is_ag_jacobian_and_its_closed_form_agrees(name):
    case = vj.OPS[name]
    x, fn = case.make(case.shape, np.random.default_rng(3))  # the first draws picture() makes with seed 3
    expected = ag.jacobian(fn, x)
    drawn = vj.picture(name, seed=3)
    left, right = drawn_matrices(drawn.figure)
    out_size = expected.size // x.size
    np.testing.assert_array_equal(left, expected.reshape(out_size, x.size))
    np.testing.assert_array_equal(right, drawn.closed.reshape(out_size, x.size))
    assert np.abs(drawn.closed - expected).max() <= 1e-6
    assert drawn.max_difference == np.abs(drawn.closed - expected).max()
    assert drawn.vjp_difference <= 1e-12


def test_softmax_closed_form_is_diag_p_minus_p_p_transposed():
    z = np.random.default_rng(0).standard_normal(5)  # picture("softmax") draws this z first
    p = np.exp(z) / np.exp(z).sum()
    drawn = vj.picture("softmax")
    np.testing.assert_allclose(drawn.closed, np.diag(p) - np.outer(p, p), atol=1e-15)
    np.testing.assert_allclose(drawn.jacobian, np.diag(p) - np.outer(p, p), atol=1e-15)


def test_embeddings_jacobian_is_its_scatter_pattern_with_the_repeated_row_read_twice():
    ids = np.random.default_rng(0).integers(0, 5, size=4)  # picture("embedding") draws the ids first
    ids[-1] = ids[0]
    drawn = vj.picture("embedding")
    j = drawn.jacobian.reshape(4, 3, 5, 3)
    for k, v in enumerate(ids):
        np.testing.assert_array_equal(j[k, :, v, :], np.eye(3))
    assert j.sum() == 4 * 3  # one 1 per output element: every other entry is 0
    np.testing.assert_array_equal(drawn.closed, drawn.jacobian)


@pytest.mark.parametrize("shape, sees", [
    ((4, 4), "query i sees keys 0 … i;"),
    ((2, 4), "query i sees keys 0 … i + 2;"),
    ((4, 2), "query i sees keys 0 … i − 2; queries 0 … 1 see none, p = 0;"),
])
def test_the_causal_masks_note_says_which_keys_each_query_sees(shape, sees):
    """The note said "query i sees keys 0 … i" whatever the shape; the mask lets the last query see every key."""
    drawn = vj.picture("masked_softmax", shape=shape)
    queries, keys = shape
    j = drawn.jacobian.reshape(queries, keys, queries, keys)
    for i in range(queries):  # J's rows are nonzero at the keys query i sees (all 0 where it sees one or none)
        seen = i + keys - queries
        assert [k for k in range(keys) if j[i, k].any()] == (list(range(seen + 1)) if seen >= 1 else [])
    assert f"mask: {sees}" in drawn.figure._supxlabel.get_text()


@pytest.mark.parametrize("shape, row, reads, read", [
    ((5, 3), 4, 2, "row 4 of W is read twice, so the VJP adds both rows of g into it"),
    ((2, 1), 1, 4, "row 1 of W is read 4 times, so the VJP adds those 4 rows of g into it"),
])
def test_the_embeddings_note_counts_the_reads_of_the_repeated_row(shape, row, reads, read):
    """The note said "read twice" however often the ids repeat the row: a table of 2 rows reads one 4 times."""
    drawn = vj.picture("embedding", shape=shape)
    rows, width = shape
    j = drawn.jacobian.reshape(4, width, rows, width)
    assert j[0, 0, row, 0] == 1 and j[:, :, row, :].sum() == reads * width  # the first id's row, read `reads` times
    assert read in " ".join(line.strip() for line in drawn.figure._supxlabel.get_text().splitlines())


def test_a_shape_of_the_users_changes_the_matrix():
    drawn = vj.picture("layer_norm", shape=(3, 2), seed=1)
    assert drawn.jacobian.shape == (3, 2, 3, 2)
    blocks = drawn.jacobian.reshape(3, 2, 3, 2)
    assert not blocks[0, :, 1, :].any() and not blocks[2, :, 0, :].any()  # each row normalised alone
    assert drawn.max_difference <= 1e-12


def test_draw_takes_any_function_and_shows_itself_as_png():
    x = np.array([0.5, -1.0, 2.0])
    figure = vj.draw(lambda t: (t * t).sum(axis=-1, keepdims=True) * t, x, closed=lambda out: (
        np.outer(x, 2 * x) + np.eye(3) * (x * x).sum()))
    left, right = drawn_matrices(figure)
    np.testing.assert_allclose(left, np.outer(x, 2 * x) + np.eye(3) * 5.25, atol=1e-14)
    np.testing.assert_allclose(right, left, atol=1e-14)
    assert figure._repr_png_().startswith(PNG)


def test_draw_writes_no_grad_into_a_parameter_fn_reads():
    """The VJP check called out.backward(g), which added gᵀ∂out/∂W into W.grad: drawing y = W x in a notebook
    changed the model it drew, where ag.jacobian leaves every .grad alone."""
    w = ag.Tensor(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), requires_grad=True)
    left, = drawn_matrices(vj.draw(lambda t: w @ t, np.array([0.5, -1.0, 2.0])))
    np.testing.assert_array_equal(left, w.data)  # the Jacobian of W x is W
    assert w.grad is None


W_ALONE = ag.Tensor(np.array([1.0, -2.0]), requires_grad=True)  # a parameter that fn reads without x


@pytest.mark.parametrize("fn", [lambda t: ag.Tensor(np.ones(2)), lambda t: t.detach() * 2.0,
                                lambda t: W_ALONE * t.detach().sum()],
                         ids=["constant", "detached", "reads only a parameter"])
def test_draw_of_a_function_that_does_not_depend_on_x_shows_a_zero_jacobian(fn):
    """ag.jacobian gives 0 there, but the VJP check failed: 'backward: this tensor does not require grad'
    (a constant), or 'NoneType' object has no attribute 'ravel' (x.grad never written)."""
    figure = vj.draw(fn, np.array([1.0, 2.0, 3.0]))
    left, = drawn_matrices(figure)
    assert left.shape[1] == 3 and not left.any()
    assert "VJP: backward(g) = gᵀJ to 0 for a random g" in figure._supxlabel.get_text()
    assert W_ALONE.grad is None


@pytest.mark.parametrize("name", ["softmax", "embedding"])
def test_an_ops_picture_inside_no_grad_is_the_same_picture(name):
    """Under no_grad() the function's graph was not recorded: 'viz.jacobian: no Softmax op in the graph of the
    case's function', though ag.jacobian records fn under no_grad() too."""
    outside = vj.picture(name)
    with ag.no_grad():
        inside = vj.picture(name)
    np.testing.assert_array_equal(inside.jacobian, outside.jacobian)
    np.testing.assert_array_equal(inside.closed, outside.closed)
    assert inside.vjp_difference == outside.vjp_difference


@pytest.mark.parametrize("x, message", [
    (np.array([1.0 + 2.0j]), "viz.jacobian.draw: x holds complex128 values; pass an array of floats"),
    ("abc", "viz.jacobian.draw: x holds <U3 values; pass an array of floats"),
    (np.zeros(0), r"viz.jacobian.draw: x has no elements \(shape \(0,\)\), so there is no Jacobian to draw"),
])
def test_draw_refuses_an_x_it_cannot_draw_by_name(x, message):
    """A complex x lost its imaginary part with a warning, a string failed in NumPy ('could not convert string
    to float'), an empty one in a reduction ('zero-size array to reduction operation maximum')."""
    with pytest.raises((TypeError, ValueError), match=message):
        vj.draw(lambda t: t * 2.0, x)


def test_draw_refuses_a_closed_form_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"closed form has shape \(3,\), the Jacobian \(3, 3\)"):
        vj.draw(lambda t: t.tanh(), np.zeros(3), closed=np.zeros(3))


@pytest.mark.parametrize("x", [np.array([0.5]), np.arange(6.0).reshape(2, 3)])
def test_the_notes_under_a_single_heatmap_are_not_cut_off(x):
    """Without a closed form there is one panel, narrower than the VJP line under it: the line ran off the
    picture's right edge (a 1-element x kept 3.6 of its 5.6 inches)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure = vj.draw(lambda t: (t * t).sum(), x)
    FigureCanvasAgg(figure).draw()
    notes = figure._supxlabel
    assert "backward never forms J" in notes.get_text()
    extent = notes.get_window_extent()
    assert 0 <= extent.x0 and extent.x1 <= figure.bbox.x1

def test_the_command_writes_the_picture(tmp_path, capsys):
    out = tmp_path / "softmax.png"
    assert vj.main(["softmax", "--shape", "2,3", "--seed", "1", "--out", str(out)]) == 0
    assert out.read_bytes().startswith(PNG)
    assert "max |ag.jacobian − closed form| = " in capsys.readouterr().out


def test_a_device_without_a_suffix_gets_the_default_png_in_place(capsys):
    """The README's `--out /dev/null` was refused: a device's name has no .png, .svg or .pdf to go by."""
    assert vj.main(["softmax", "--shape", "2,3", "--out", "/dev/null"]) == 0
    assert capsys.readouterr().out.startswith("wrote /dev/null: ")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize("name", ["softmax.png", "pipe"])
def test_the_picture_goes_into_a_pipe_and_leaves_the_pipe_a_pipe(piped, capsys, name):
    """matplotlib's PNG writer seeks, which a pipe refuses: `--out` a FIFO ended in "File or stream is not
    seekable" and wrote nothing, though the README promises a pipe is written in place."""
    pipe, received = piped(name)
    assert vj.main(["softmax", "--shape", "2,3", "--out", str(pipe)]) == 0
    assert received().startswith(PNG)
    assert capsys.readouterr().out.startswith(f"wrote {pipe}: ")
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)


def test_a_ctrl_c_while_the_picture_is_written_leaves_no_picture(tmp_path, monkeypatch):
    def interrupted(path, data):
        with open(path, "wb") as f:
            f.write(data[:len(PNG)])  # the picture's first bytes, then the Ctrl-C
        raise KeyboardInterrupt
    monkeypatch.setattr(Path, "write_bytes", interrupted)
    with pytest.raises(KeyboardInterrupt):
        vj.main(["softmax", "--shape", "2,3", "--out", str(tmp_path / "softmax.png")])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    (["softmax", "--shape", "2,x"], "is not a shape"),
    (["softmax", "--shape", "9,9"], "has 81 elements"),
    (["matmul", "--shape", "6"], "matmul takes A (rows, inner)"),
    (["softmax", "--out", "j.jpg"], ".png, .svg or .pdf"),
    (["relu"], "invalid choice: 'relu'"),
])
def test_bad_input_is_refused_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        vj.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("name, defined", [("gelu", "u = √(2/π)(x + 0.044715x³)"), ("tanh", "z = tanh x")])
def test_the_title_says_what_each_letter_of_its_closed_form_is(name, defined):
    """gelu's title used u and u′ and never said what u is; tanh's z is its output, where softmax's is its input."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure = vj.picture(name).figure
    FigureCanvasAgg(figure).draw()
    title = figure._suptitle
    assert defined in title.get_text()
    extent = title.get_window_extent()
    assert 0 <= extent.x0 and extent.x1 <= figure.bbox.x1
