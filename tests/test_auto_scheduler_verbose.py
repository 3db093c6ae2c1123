"""auto_scheduler verbose output: per-round ``No: N\tGFLOPS: round / best`` lines (verbose 1)
and TVM's per-measurement blocks (verbose 2), checked against the records of a real run."""

from __future__ import annotations

import re

from templtune import auto_scheduler as auto
from templtune import te

ROUND = re.compile(r"^No: (\d+)\tGFLOPS: (\d+\.\d\d) / (\d+\.\d\d)\t\((\d+) measured, "
                   r"(\d+) errors\)\tTime elapsed for measurement: \d+\.\d\d s$", re.M)
BLOCK = re.compile(r"^={50}\nNo: (\d+)\tGFLOPS: (\d+\.\d\d) / (\d+\.\d\d)\tresults: "
                   r"MeasureResult\((?:error_type:\w+, )?cost:\[[^\]]*\], error_no:(\d+), "
                   r"all_cost:\d+\.\d\d, Tstamp:\d+\.\d\d\)\n={50}$", re.M)


@auto.register_workload("test_as_verbose_matmul", override=True)
def matmul(n: int) -> list:
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    r = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return [a, b, c]


def _tune(tmp_path, verbose: int, capsys) -> tuple[str, list]:
    task = auto.SearchTask(func=matmul, args=(32,), target="llvm")
    log = str(tmp_path / f"v{verbose}.json")
    opt = auto.TuningOptions(num_measure_trials=8, num_measures_per_round=4, verbose=verbose,
                             runner=auto.LocalRunner(repeat=1, min_repeat_ms=1),
                             measure_callbacks=[auto.RecordToFile(log)])
    pol = auto.SketchPolicy(task, seed=0, verbose=verbose,
                            params={"evolutionary_search_population": 32})
    task.tune(opt, search_policy=pol)
    gflops = [task.compute_dag.flop_ct / r.mean_cost / 1e9 if r.error_no == 0 else 0.0
              for _, r in auto.RecordReader(log)]
    return capsys.readouterr().out, gflops


def test_verbose_1_prints_round_and_best_gflops(tmp_path, capsys) -> None:
    out, gflops = _tune(tmp_path, 1, capsys)
    rounds = ROUND.findall(out)
    assert [int(r[0]) for r in rounds] == [4, 8], out
    for k, (ct, cur, best, n, _) in enumerate(rounds):
        done = gflops[:int(ct)]
        assert int(n) == 4
        assert abs(float(best) - max(done)) <= 0.006
        assert abs(float(cur) - max(gflops[4 * k:4 * k + 4])) <= 0.006
    assert not BLOCK.search(out)  # the per-measurement blocks are verbose 2


def test_verbose_2_prints_tvm_blocks_per_measurement(tmp_path, capsys) -> None:
    out, gflops = _tune(tmp_path, 2, capsys)
    blocks = BLOCK.findall(out)
    assert [int(b[0]) for b in blocks] == list(range(1, 9)), out
    for ct, cur, best, err in blocks:
        i = int(ct) - 1
        assert abs(float(cur) - gflops[i]) <= 0.006
        assert abs(float(best) - max(gflops[:i + 1])) <= 0.006
        assert (int(err) == 0) == (gflops[i] > 0)
