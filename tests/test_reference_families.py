"""Packaged CPU reference logs per ISA family: the Target's capabilities pick the file, the
other family's log serves (with a warning) when the own one is missing; and the pipeline
(logs/reference_logs.py) that regenerates them from one workload file."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from templtune.autotvm import record
from templtune.autotvm.measure import MeasureInput, MeasureResult
from templtune.autotvm.task import reference
from templtune.autotvm.task.reference import (
    FAMILY_LOGS,
    IsaFamily,
    isa_family,
    load_reference_log,
    reference_log_files,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "logs"))

import reference_logs  # noqa: E402

AVX2 = "llvm -mcpu=haswell"
AVX512 = "llvm -mcpu=skylake-avx512"
ZEN4 = "llvm -mcpu=znver4"


def test_family_from_target_capabilities():
    assert isa_family(AVX2) is IsaFamily.AVX2
    assert isa_family(AVX512) is IsaFamily.AVX512
    assert isa_family("llvm -mcpu=icelake-server") is IsaFamily.AVX512
    assert isa_family("llvm -mcpu=znver5") is IsaFamily.AVX512
    # the same AVX-512 code on 256-bit FMA units: its own log, the AVX-512 family's workloads
    assert isa_family(ZEN4) is IsaFamily.AVX512_256
    assert IsaFamily.AVX512_256.isa is IsaFamily.AVX512
    assert isa_family("llvm -mcpu=znver4 -mattr=-avx512f") is IsaFamily.AVX2
    assert isa_family("llvm -mcpu=x86-64") is None  # SSE only: no family
    assert isa_family("cuda") is None


def _dense_task():
    from templtune import autotvm
    from templtune.templates import load

    load("x86")
    return autotvm.task.create("dense", (1, 1000, 512), "llvm")


def _write(path: Path, task, index: int) -> None:
    inp = MeasureInput("llvm", task, task.config_space.get(index))
    record.save_to_file([(inp, MeasureResult((1e-4,), 0, 0.0, 0.0))], path)


@pytest.fixture
def family_dir(tmp_path, monkeypatch):
    """Only a temporary folder with one record per family log and a user log."""
    monkeypatch.setattr(reference, "reference_log_dirs", lambda: [tmp_path])
    monkeypatch.delenv("TEMPLTUNE_NO_TOPHUB", raising=False)
    reference._warned.clear()
    (tmp_path / "cpu").mkdir()
    task = _dense_task()
    _write(tmp_path / "cpu" / FAMILY_LOGS[IsaFamily.AVX2], task, 1)
    _write(tmp_path / "cpu" / FAMILY_LOGS[IsaFamily.AVX512], task, 2)
    _write(tmp_path / "cpu" / "mine.log", task, 3)
    return tmp_path / "cpu"


def test_target_family_picks_its_log(family_dir):
    names = {t: sorted(f.name for f in reference_log_files(t)) for t in (AVX2, AVX512)}
    assert names[AVX2] == ["mine.log", "x86.log"]
    assert names[AVX512] == ["mine.log", "x86_avx512.log"]
    idx = {t: sorted(i.config.index for i, _ in load_reference_log(t, "dense"))
           for t in (AVX2, AVX512)}
    assert idx == {AVX2: [1, 3], AVX512: [2, 3]}


def test_missing_family_log_falls_back_with_a_warning(family_dir, caplog):
    (family_dir / FAMILY_LOGS[IsaFamily.AVX512]).unlink()
    with caplog.at_level(logging.WARNING, logger="autotvm"):
        files = sorted(f.name for f in reference_log_files(AVX512))
        reference_log_files(AVX512)  # warned once only
    assert files == ["mine.log", "x86.log"]
    warnings = [r for r in caplog.records if "no avx512 reference log" in r.getMessage()]
    assert len(warnings) == 1 and "tuned for avx2" in warnings[0].getMessage()
    # an own-family log present: no warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="autotvm"):
        reference_log_files(AVX2)
    assert not caplog.records


def test_missing_log_takes_the_nearest_family_only(family_dir, caplog):
    """Zen 4 without its own log takes the AVX-512 log (the same code), not the AVX2 one too;
    with its log present, an AVX-512 CPU without one takes it before the AVX2 log."""
    assert sorted(f.name for f in reference_log_files(ZEN4)) == ["mine.log", "x86_avx512.log"]
    assert sorted(i.config.index for i, _ in load_reference_log(ZEN4, "dense")) == [2, 3]
    _write(family_dir / FAMILY_LOGS[IsaFamily.AVX512_256], _dense_task(), 4)
    assert sorted(f.name for f in reference_log_files(ZEN4)) == ["mine.log",
                                                                 "x86_avx512_256.log"]
    (family_dir / FAMILY_LOGS[IsaFamily.AVX512]).unlink()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="autotvm"):
        names = sorted(f.name for f in reference_log_files(AVX512))
    assert names == ["mine.log", "x86_avx512_256.log"]
    assert [r.getMessage().endswith("(tuned for avx512_256)") for r in caplog.records] == [True]
    assert sorted(f.name for f in reference_log_files("llvm -mcpu=x86-64")) == [
        "mine.log", "x86.log"]


def test_seed_configs_travel_by_knob_values(tmp_path):
    """A new family's tuning starts from another family's best configs, matched by their knob
    values (a record's index may name another point of this space); costs do not travel."""
    task = _dense_task()
    space = task.config_space
    picks = [space.get(i) for i in (1, 2, 3)]
    recs = []
    for cost, cfg in zip((3e-4, 1e-4, 2e-4), picks):
        stale = type(cfg)((cfg.index + 1) % len(space), None, cfg._entity_map, [])
        recs.append((MeasureInput("llvm", task, stale), MeasureResult((cost,), 0, 0.0, 0.0)))
    recs.append((MeasureInput("llvm", task, space.get(0)), MeasureResult((1e9,), 4, 0.0, 0.0)))
    w = reference_logs.Workload("dense", tuple(task.args))
    record.save_to_file(recs, tmp_path / f"{w.stem}.log")
    got = reference_logs.seed_configs(tmp_path, w, 2, space)
    assert [c.index for c in got] == [picks[1].index, picks[2].index]
    assert all(space.point_of(c) == c for c in got)
    assert reference_logs.seed_configs(tmp_path, w, 0, space) == []
    assert reference_logs.seed_configs(None, w, 2, space) == []


def test_workload_file_parses_and_round_trips(tmp_path):
    ws = reference_logs.read_workloads()
    assert len(ws) >= 50
    keys = {(w.template, w.args) for w in ws}
    assert ("conv2d_nchw", (1, 7, 7, 512, 512, 3, 3, 1, 1)) in keys  # the seed layer
    assert len(keys) == len(ws)
    f = tmp_path / "w.txt"
    f.write_text("\n".join(w.line() for w in ws) + "\n")
    assert reference_logs.read_workloads(f) == ws
    f.write_text("dense 1,x,3\n")
    with pytest.raises(ValueError, match="integers"):
        reference_logs.read_workloads(f)


@pytest.mark.parametrize("family", list(reference_logs.FAMILY_TARGETS))
def test_workload_file_covers_what_the_build_instantiates(family):
    """Every AutoTVM task building the three networks extracts for a family's target is in
    the workload file, under that family."""
    target = reference_logs.FAMILY_TARGETS[family]
    listed = {(w.template, w.args) for w in reference_logs.read_workloads()
              if family.value in reference_logs.families_of(w)}
    found = {(w.template, w.args) for w in reference_logs.network_workloads(target, False)}
    assert found <= listed, ("run python3 logs/reference_logs.py --refresh-workloads: "
                             f"missing {sorted(found - listed)}")


@pytest.mark.parametrize("family", list(reference_logs.FAMILY_TARGETS))
def test_packaged_log_covers_the_blocked_build(family):
    """The family's packaged log has a record for every blocked conv (direct and depthwise)
    that building the networks at opt_level 3 for the family's target instantiates."""
    target = reference_logs.FAMILY_TARGETS[family]
    blocked = {"conv2d_NCHWc", "depthwise_conv2d_NCHWc"}
    found = {(w.template, w.args) for w in reference_logs.network_workloads(target, False)
             if w.template in blocked}
    log = ROOT / "templates" / "logs" / "cpu" / FAMILY_LOGS[family]
    have = {(inp.task.name, tuple(inp.task.args)) for inp, res in record.load_from_file(log)
            if int(res.error_no) == 0}
    assert found <= have, f"{log.name} lacks {sorted(found - have)}"


def test_pipeline_block_and_families_of_a_line():
    assert reference_logs.pipeline_block(AVX2) == 16
    assert reference_logs.pipeline_block(AVX512) == 32
    w = reference_logs.Workload("dense", (1, 2, 3), "mobilenet; avx2")
    assert reference_logs.families_of(w) == {"avx2"}
    untagged = reference_logs.Workload("dense", (1, 2, 3), "mobilenet")
    assert reference_logs.families_of(untagged) == {f.value for f in IsaFamily}
    # a family running another's code has its workloads
    tagged = reference_logs.Workload("dense", (1, 2, 3), "resnet-18; avx512")
    assert reference_logs.families_of(tagged) == {"avx512", "avx512_256"}
    assert reference_logs.pipeline_block(ZEN4) == 32


def test_distill_keeps_the_best_record_of_listed_workloads(tmp_path):
    task = _dense_task()
    raw = tmp_path / "raw"
    raw.mkdir()
    cfg = task.config_space
    recs = [(MeasureInput("llvm", task, cfg.get(i)), MeasureResult((c,), err, 0.0, 0.0))
            for i, c, err in ((0, 3e-4, 0), (1, 1e-4, 0), (2, 1e-5, 4))]  # 2: an error
    record.save_to_file(recs, raw / "a.log")
    out = tmp_path / "out.log"
    wl = [reference_logs.Workload("dense", (1, 1000, 512))]
    assert reference_logs.distill(raw, out, wl) == 1
    (inp, _), = list(record.load_from_file(out))
    assert inp.config.index == 1
    assert reference_logs.distill(raw, out, [reference_logs.Workload("dense", (1, 2, 3))]) == 0


def test_merge_replaces_only_the_selected_workloads(tmp_path):
    from templtune import autotvm

    task = _dense_task()
    other_task = autotvm.task.create("dense", (1, 1000, 2048), "llvm")
    out = tmp_path / "out.log"
    cfg = task.config_space
    record.save_to_file([
        (MeasureInput("llvm", other_task, other_task.config_space.get(0)),
         MeasureResult((9e-4,), 0, 0.0, 0.0)),
        (MeasureInput("llvm", task, cfg.get(0)), MeasureResult((5e-4,), 0, 0.0, 0.0))], out)
    other = out.read_text().splitlines()[0]
    raw = tmp_path / "raw"
    raw.mkdir()
    new = [(MeasureInput("llvm", task, cfg.get(i)), MeasureResult((c,), 0, 0.0, 0.0))
           for i, c in ((1, 3e-4), (2, 2e-4))]
    record.save_to_file(new, raw / "a.log")
    wl = [reference_logs.Workload(task.name, tuple(task.args))]
    assert reference_logs.merge(raw, out, wl) == 1
    lines = out.read_text().splitlines()
    assert len(lines) == 2 and lines[0] == other  # the other workload's line kept as it was
    (_, _), (inp, res) = list(record.load_from_file(out))
    assert inp.config.index == 2 and res.costs == (2e-4,)


@pytest.mark.parametrize("family", list(reference_logs.FAMILY_TARGETS))
def test_multithread_records_cover_every_implementation_of_their_layer(family):
    """Step 5's layers are the networks' blocked convs with a Winograd variant (the direct
    kernel first); a family log that holds a record timed on N threads for one of a layer's
    implementations holds one for each of them, so a build on N threads compares the layer's
    implementations at one thread count."""
    target = reference_logs.FAMILY_TARGETS[family]
    layers = reference_logs.competing_layers(target)
    assert layers, "the networks have 3x3 convs Winograd can compute"
    for layer in layers:
        assert layer[0][0] == "conv2d_NCHWc" and len(layer) > 1
        assert {t for t, _ in layer[1:]} == {"conv2d_NCHWc_winograd"}
        assert all(a[:9] == layer[0][1] for _, a in layer)
    log = ROOT / "templates" / "logs" / "cpu" / FAMILY_LOGS[family]
    timed: dict[int, set] = {}
    for inp, res in record.load_from_file(log):
        if res.threads > 1:
            timed.setdefault(res.threads, set()).add((inp.task.name, tuple(inp.task.args)))
    for n, have in timed.items():
        for layer in layers:
            if have & set(layer):
                assert set(layer) <= have, f"{log.name}: {n}-thread records of {layer}"
        assert have <= {w for layer in layers for w in layer}


def test_select_by_template_and_network():
    ws = [reference_logs.Workload("dense", (1, 2, 3), "vit-b16; avx2"),
          reference_logs.Workload("dense", (1, 2, 4), "resnet-18 mobilenet"),
          reference_logs.Workload("batch_matmul", (1, 2, 3, 4), "vit-b16"),
          reference_logs.Workload("dense", (1, 2, 5), "resnet-18; vit-b16")]
    assert reference_logs.select(ws, None, None) == ws
    assert reference_logs.select(ws, "dense", None) == [ws[0], ws[1], ws[3]]
    assert reference_logs.select(ws, None, "vit-b16") == [ws[0], ws[2]]  # not a family name
    assert reference_logs.select(ws, "dense", "mobilenet") == [ws[1]]
    listed = reference_logs.select(reference_logs.read_workloads(), "batch_matmul", "vit-b16")
    assert {w.args for w in listed} >= {(12, 577, 577, 64), (12, 577, 64, 577, 0, 0)}
