"""``templtune report``: a page rendered from real tuning runs, loaded in headless Chromium
(its figures decode, the screenshot is not blank), its PNG files, the network section, and the
clear error without matplotlib."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from test_cli_tools import templtune_cmd

mpimg = pytest.importorskip("matplotlib.image")

IMG = re.compile(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)">')
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _pixels_vary(png: bytes) -> bool:
    """True when the image is not one flat colour."""
    img = mpimg.imread(io.BytesIO(png), format="png")
    return img.ndim == 3 and float(np.std(img[..., :3])) > 0.01


def _tune(log: Path, args: str, trials: int) -> None:
    p = templtune_cmd("tune", "--template", "dense", "--args", args, "--tuner", "random",
                      "--n-trial", str(trials), "--log", str(log), "--number", "1",
                      "--repeat", "1", "--n-parallel", "1", "--no-progress")
    assert p.returncode == 0, p.stderr


@pytest.fixture(scope="module")
def one_task_log(tmp_path_factory) -> Path:
    log = tmp_path_factory.mktemp("report") / "dense.log"
    _tune(log, "16,32,16", 16)
    return log


def _chromium(*args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--enable-logging=stderr",
             "--virtual-time-budget=10000", *args],
            capture_output=True, text=True, timeout=300)


def test_report_of_one_task(one_task_log, tmp_path):
    out, png_dir = tmp_path / "report.html", tmp_path / "png"
    p = templtune_cmd("report", str(one_task_log), "-o", str(out), "--png", str(png_dir))
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert "dense(16, 32, 16)" in page and "Best config:" in page and "16 trials" in page
    assert "Network" not in page  # one task: no network section
    images = IMG.findall(page)
    assert len(images) == 2  # the curve (trials, wall time) and the error codes
    for data in images:
        png = base64.b64decode(data)
        assert png.startswith(b"\x89PNG") and _pixels_vary(png)
    files = sorted(png_dir.glob("*.png"))
    assert [f.name for f in files] == ["task00_curve.png", "task00_errors.png"]
    assert all(_pixels_vary(f.read_bytes()) for f in files)
    assert "src=\"http" not in page and "<link" not in page  # nothing to fetch: works offline


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_report_loads_in_headless_chromium(one_task_log, tmp_path):
    out = tmp_path / "report.html"
    assert templtune_cmd("report", str(one_task_log), "-o", str(out)).returncode == 0
    dom = _chromium("--dump-dom", out.as_uri())
    assert dom.returncode == 0, dom.stderr
    body = re.search(r"<body[^>]*>", dom.stdout).group(0)
    assert 'data-images="ok"' in body and 'data-image-count="2"' in body, body
    assert "Uncaught" not in dom.stderr  # no script error on the page
    shot = tmp_path / "shot.png"
    p = _chromium(f"--screenshot={shot}", "--window-size=1200,2000", out.as_uri())
    assert p.returncode == 0 and shot.is_file(), p.stderr
    img = mpimg.imread(shot)
    assert img.shape[:2] == (2000, 1200)
    # the figures' curves are coloured: a page without them is black text on white
    rgb = img[..., :3]
    coloured = np.abs(rgb - rgb.mean(axis=-1, keepdims=True)).max(axis=-1) > 0.15
    assert coloured.sum() > 500


def test_report_of_several_tasks_has_the_network_section(tmp_path):
    log = tmp_path / "net.log"
    _tune(log, "4,16,8", 4)
    _tune(log, "8,32,16", 4)
    out, png_dir = tmp_path / "r.html", tmp_path / "png"
    p = templtune_cmd("report", str(log), "-o", str(out), "--png", str(png_dir))
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert "<h2>Network</h2>" in page and "every task weighs 1" in page
    shares = [float(x) for x in re.findall(r"<td>([\d.]+)%</td></tr>", page)]
    assert len(shares) == 2 and abs(sum(shares) - 100) < 0.2
    assert len(IMG.findall(page)) == 1 + 2 * 2
    assert _pixels_vary((png_dir / "network_latency.png").read_bytes())


def test_report_of_an_auto_scheduler_log(tmp_path):
    log = Path(__file__).parent / "data" / "as_dense128_records.json"
    n = sum(1 for x in log.read_text().splitlines() if x.strip())
    out = tmp_path / "as.html"
    p = templtune_cmd("report", str(log), "-o", str(out))
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert "bench_cm_dense(128, 128, 128) [llvm]" in page and f"{n} trials" in page
    assert "FLOP count unknown" in page  # not registered in this process: latency axis
    assert '[&quot;SP&quot;, 2' in page  # the best record's transform steps
    assert all(_pixels_vary(base64.b64decode(d)) for d in IMG.findall(page))


def test_report_errors_are_one_line(tmp_path):
    p = templtune_cmd("report", str(tmp_path / "missing.log"), "-o", str(tmp_path / "r.html"))
    assert p.returncode == 1 and "no such log file" in p.stderr
    bad = tmp_path / "bad.log"
    bad.write_text('{"hello": 1}\n')
    p = templtune_cmd("report", str(bad), "-o", str(tmp_path / "r.html"))
    assert p.returncode == 1 and "not an AutoTVM or auto-scheduler tuning log" in p.stderr


def test_report_without_matplotlib_says_how_to_install(one_task_log, tmp_path):
    fake = tmp_path / "nomatplotlib" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    p = templtune_cmd("report", str(one_task_log), "-o", str(tmp_path / "r.html"),
                      env={"PYTHONPATH": str(fake.parent)})
    assert p.returncode == 1
    assert "pip install 'templtune[plot]'" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_report_of_a_tuned_network_uses_the_task_weights(tmp_path):
    log = tmp_path / "m.json"
    p = templtune_cmd("tune-network", "mobilenet", "--image-shape", "3,32,32", "--per-round",
                      "1", "--model", "random", "--trials", "60", "--log", str(log),
                      "--timing-repeat", "1", "--timing-ms", "1", "--no-progress")
    assert p.returncode == 0, p.stderr
    table = json.loads(Path(f"{log}.tasks.json").read_text())["tasks"]
    out = tmp_path / "m.html"
    p = templtune_cmd("report", str(log), "-o", str(out))
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert "task weights from the task table" in page
    assert f"{len(table)} task(s)" in page
    assert "Estimated latency (sum of weight &times; best latency): <b>" in page
    assert len(IMG.findall(page)) == 1 + 2 * len(table)


def test_live_plot_callback_redraws_after_every_batch(tmp_path):
    from templtune import autotvm
    from templtune.templates import load

    load("x86")
    task = autotvm.task.create("dense", (16, 32, 16), "llvm")
    png = tmp_path / "curve.png"
    seen: list[bytes] = []
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2),
                                    runner=autotvm.LocalRunner(number=1, repeat=1))
    tuner = autotvm.tuner.RandomTuner(task, seed=0)
    tuner.tune(n_trial=6, measure_option=option,
               callbacks=[autotvm.callback.plot(png),
                          lambda t, i, r: seen.append(png.read_bytes())])
    for part in option.values():
        part.close()
    assert len(seen) == 3 and len(set(seen)) == 3  # one new image per batch of 2
    assert all(_pixels_vary(x) for x in seen)
    assert not (tmp_path / "curve.png.tmp.png").exists()
