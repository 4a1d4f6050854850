"""models.moons: micrograd's demo on Value: the data, the NumPy picture's scores, and the full run's 100 %."""
import math
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autograd import Value
from models.lessons import moons
from models.lessons.value_nn import DEMO_SIZES, MLP

ROOT = Path(__file__).resolve().parents[2]


def test_make_moons_draws_two_seeded_half_circles():
    points, labels = moons.make_moons(100, noise=0.0)
    assert points.shape == (100, 2) and list(labels) == [-1.0] * 50 + [1.0] * 50
    upper, lower = points[:50], points[50:]
    np.testing.assert_allclose(np.hypot(*upper.T), 1.0)  # on the unit circle, above the axis
    np.testing.assert_allclose(np.hypot(lower[:, 0] - 1, lower[:, 1] - 0.5), 1.0)  # centre (1, 1/2), below it
    assert upper[:, 1].min() >= 0 and lower[:, 1].max() <= 0.5
    a, _ = moons.make_moons(100, noise=0.1, seed=7)
    b, _ = moons.make_moons(100, noise=0.1, seed=7)
    assert np.array_equal(a, b) and not np.array_equal(a, points)
    assert np.std(a - points) == pytest.approx(0.1, rel=0.15)
    assert moons.make_moons(5)[1].tolist() == [-1, -1, 1, 1, 1]
    with pytest.raises(ValueError, match="make_moons: n must be an integer of at least 2"):
        moons.make_moons(1)


def test_numpy_scores_are_the_value_networks():
    model = MLP(DEMO_SIZES, seed=2)
    points, _ = moons.make_moons(20, seed=1)
    by_value = [model([Value(x) for x in p]).data for p in points.tolist()]
    np.testing.assert_allclose(moons.scores(model, points), by_value, rtol=1e-12, atol=1e-12)


def test_demo_loss_is_a_small_deterministic_value():
    a, b = moons.demo_loss(), moons.demo_loss()
    assert isinstance(a, Value) and a is not b and a.data == b.data and a.name == "loss"
    assert len(a.topological_order()) < 100  # small enough to draw
    a.backward()
    assert any(v.grad != 0 for v in a.topological_order() if v.name and v.name.startswith("L1."))


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """`python -m models.moons` with its defaults (about 25 s): micrograd's demo, 100 steps on 100 points."""
    out = tmp_path_factory.mktemp("moons") / "boundary.png"
    run = subprocess.run([sys.executable, "-m", "models.moons", "--out", str(out)], cwd=ROOT,
                         capture_output=True, text=True)
    return run, out


def test_training_reaches_micrograds_100_percent(full_run):
    run, _ = full_run
    assert run.returncode == 0, run.stderr
    logged = {int(m[1]): (float(m[2]), int(m[3])) for m in
              re.finditer(r"step +(\d+) +loss (\d+\.\d+) +accuracy (\d+)%", run.stdout)}
    assert sorted(logged) == list(range(0, 101, 10))
    assert logged[0][1] <= 60 and logged[0][0] > 0.5  # untrained: about a coin toss
    assert logged[100][1] == 100 and logged[100][0] < 0.03  # micrograd's demo ends at 100 % too
    assert all(logged[s][0] > logged[100][0] for s in range(0, 100, 10))  # it ends lower than it ever was
    final = re.search(r"after 100 steps: loss (\d+\.\d+), accuracy 100% \(100 of 100 points", run.stdout)
    assert final and math.isclose(float(final[1]), logged[100][0])


def test_command_writes_the_boundary_png(full_run):
    run, out = full_run
    assert f"wrote {out}: the decision boundary" in run.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # the atomic write left no temporary file


@pytest.mark.parametrize("argv, message", [
    (["--points", "1"], "argument --points: must be in [2, inf), got 1"),
    (["--out", "."], "argument --out: . is a folder; give a file name"),
])
def test_bad_options_cost_one_line(argv, message):
    run = subprocess.run([sys.executable, "-m", "models.moons", *argv], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [f"python -m models.moons: error: {message} (see --help)"]


@pytest.mark.parametrize("name", ["b.txt", "b"])
def test_a_picture_name_without_its_format_is_refused_before_the_run(tmp_path, capsys, name):
    with pytest.raises(SystemExit) as exit_:
        moons.main(["--steps", "1", "--points", "4", "--out", str(tmp_path / name)])
    assert (exit_.value.code, *capsys.readouterr()) == (
        2, "", f"python -m models.moons: error: argument --out: the name {str(tmp_path / name)!r}: a picture is "
               "written as .png, .svg or .pdf; end its name with one (see --help)\n")
    assert list(tmp_path.iterdir()) == []


def test_the_picture_is_written_in_the_format_its_suffix_names(tmp_path, capsys):
    """--out b.svg held PNG bytes, which no SVG viewer opens."""
    assert moons.main(["--steps", "1", "--points", "4", "--out", str(tmp_path / "b.svg")]) in (0, None)
    assert (tmp_path / "b.svg").read_text().startswith("<?xml") and "<svg" in (tmp_path / "b.svg").read_text()


def test_one_step_is_said_in_the_singular(tmp_path, capsys):
    """It printed "over 1 steps" and "after 1 steps"."""
    assert moons.main(["--steps", "1", "--points", "4", "--out", str(tmp_path / "b.png")]) in (0, None)
    out = capsys.readouterr().out
    assert "SGD with lr 1.0 → 0.1 over 1 step\n" in out and "\nafter 1 step: loss " in out


def test_the_picture_goes_into_a_pipe(piped):
    """matplotlib's PNG writer seeks, which a pipe refuses: --out a FIFO ended in "File or stream is not seekable"."""
    pipe, received = piped("moons.png")
    assert moons.main(["--steps", "1", "--points", "4", "--out", str(pipe)]) in (0, None)
    assert received()[:8] == b"\x89PNG\r\n\x1a\n" and stat.S_ISFIFO(os.stat(pipe).st_mode)
