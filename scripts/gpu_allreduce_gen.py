"""Build the cross-thread-reduction CUDA cases for a device check (run from the repo root).

Writes OUT.json / OUT.npz (default gpu_allreduce_cases): cubins, launch shapes, inputs and numpy
references; every case is also run in the emulator here. On the GPU machine run
``python3 scripts/gpu_allreduce_run.py gpu_allreduce_cases`` (needs only numpy and libcuda).
"""

import base64
import json
import sys

sys.path.insert(0, "tests")
import numpy as np
import test_auto_scheduler_gpu_rules as R
import test_cuda_allreduce as T

import templtune

cases = []


def add(name, mod, ins, ref):
    # ins: list of arrays for module params (outputs zero-filled); ref: expected final arrays of params
    cases.append(
        dict(
            name=name,
            binary=mod.binary,
            launches=[(x.name, x.grid, x.block, x.args) for x in mod.launches],
            params=[(p.dtype, p.shape) for p in mod.params],
            ws=[(w.dtype, w.shape) for w in mod.workspace],
            ins=ins,
            ref=ref,
        )
    )
    mod.emulate(*[a.copy() for a in ins])


rng = np.random.default_rng(0)
for nt in (32, 48, 64, 128):
    s, A, B = T._row_reduce(5, nt * 3, nt)
    m = templtune.build(s, [A, B], target="cuda")
    a = rng.random((5, nt * 3), dtype=np.float32)
    add(f"rowsum{nt}", m, [a, np.zeros(5, "float32")], a.sum(1))
for kind in ("max", "min"):
    s, A, B = T._row_reduce(4, 96, 48, kind)
    m = templtune.build(s, [A, B], target="cuda")
    a = rng.standard_normal((4, 96)).astype("float32")
    add(f"row{kind}48", m, [a, np.zeros(4, "float32")], getattr(a, kind)(1))
for kind in ("sum", "min"):
    s, A, B = T._direct_bound(kind)
    m = templtune.build(s, [A, B], target="cuda")
    a = rng.standard_normal((3, 100)).astype("float32")
    add(f"direct_{kind}", m, [a, np.zeros(3, "float32")], a.sum(1) if kind == "sum" else a.min(1))
# 2-D threads
rows, n = 8, 64
s, A, B = T._two_d_threads(rows, n)
m = templtune.build(s, [A, B], target="cuda")
a = rng.random((rows, n), dtype=np.float32)
add("twod", m, [a, np.zeros(rows, "float32")], a.sum(1))


# auto-scheduler sampled states
def softref(a):
    e = np.exp(a - a.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


for nm, tens, ref, seed in [
    ("as_min", R.min_last(4, 256), lambda a: a.min(1), 3),
    ("as_softmax", R.softmax(2, 128), softref, 3),
    ("as_matmul", R.matmul(4, 4, 256), lambda a, b: a @ b, 3),
]:
    pol = R._policy(tens, seed=seed)
    for j, st in enumerate(pol.sample_initial_population(4)[:3]):
        st = R._small_unroll(pol.dag, st)
        sch, args = pol.dag.apply_steps_from_state(st, is_gpu=True)
        m = templtune.build(sch, args, target="cuda")
        ins = [
            rng.uniform(-1, 1, [int(x.value) for x in t.shape]).astype("float32") for t in tens[:-1]
        ]
        r = ref(*ins)
        add(f"{nm}{j}", m, ins + [np.zeros(r.shape, "float32")], r)
tens, ref = R._winograd_data_pack()
pol = R._policy(tens, seed=2)
st = R._small_unroll(pol.dag, pol.sample_initial_population(2)[0])
sch, args = pol.dag.apply_steps_from_state(st, is_gpu=True)
m = templtune.build(sch, args, target="cuda")
d = rng.uniform(-1, 1, (1, 8, 8, 32)).astype("float32")
add("winograd_pack", m, [d, np.zeros((4, 4, 16, 32), "float32")], ref(d))
for c in cases:
    assert c["binary"], c["name"]
out = sys.argv[1] if len(sys.argv) > 1 else "gpu_allreduce_cases"
arrays, meta = {}, []
for i, c in enumerate(cases):
    meta.append(
        dict(
            name=c["name"],
            binary=base64.b64encode(c["binary"]).decode(),
            launches=c["launches"],
            ws=[(d, list(s)) for d, s in c["ws"]],
            n_in=len(c["ins"]),
        )
    )
    for j, a in enumerate(c["ins"]):
        arrays[f"c{i}_in{j}"] = a
    arrays[f"c{i}_ref"] = np.asarray(c["ref"])
json.dump(meta, open(out + ".json", "w"))
np.savez(out + ".npz", **arrays)
print(len(cases), "cases")
