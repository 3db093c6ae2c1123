"""Device check of the gpu_allreduce_gen.py cases: load the cubins with the CUDA driver (ctypes), run, compare with numpy."""

import base64
import ctypes as C
import json
import sys

import numpy as np

cu = C.CDLL("libcuda.so.1")


def ck(r, what):
    if r != 0:
        s = C.c_char_p()
        cu.cuGetErrorString(r, C.byref(s))
        raise RuntimeError(f"{what}: {r} {s.value}")


ck(cu.cuInit(0), "init")
dev = C.c_int()
ck(cu.cuDeviceGet(C.byref(dev), 0), "dev")
ctx = C.c_void_p()
ck(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev), "ctx")
ck(cu.cuCtxSetCurrent(ctx), "set")
cu.cuMemAlloc_v2.argtypes = [C.POINTER(C.c_uint64), C.c_size_t]
cu.cuMemcpyHtoD_v2.argtypes = [C.c_uint64, C.c_void_p, C.c_size_t]
cu.cuMemcpyDtoH_v2.argtypes = [C.c_void_p, C.c_uint64, C.c_size_t]
cu.cuMemFree_v2.argtypes = [C.c_uint64]

meta = json.load(open(sys.argv[1] + ".json"))
npz = np.load(sys.argv[1] + ".npz")
cases = [
    dict(
        name=m["name"],
        binary=base64.b64decode(m["binary"]),
        launches=m["launches"],
        ws=m["ws"],
        ins=[npz[f"c{i}_in{j}"] for j in range(m["n_in"])],
        ref=npz[f"c{i}_ref"],
    )
    for i, m in enumerate(meta)
]
res = {}
for c in cases:
    try:
        mod = C.c_void_p()
        ck(cu.cuModuleLoadData(C.byref(mod), C.c_char_p(c["binary"])), "load")
        arrs = [np.ascontiguousarray(a).copy() for a in c["ins"]]
        arrs += [np.full(int(np.prod(s)), np.nan, dtype=d) for d, s in c["ws"]]
        ptrs = []
        for a in arrs:
            p = C.c_uint64()
            ck(cu.cuMemAlloc_v2(C.byref(p), max(a.nbytes, 4)), "alloc")
            ck(cu.cuMemcpyHtoD_v2(p.value, a.ctypes.data, a.nbytes), "htod")
            ptrs.append(p)
        for name, grid, block, args in c["launches"]:
            f = C.c_void_p()
            ck(cu.cuModuleGetFunction(C.byref(f), mod, name.encode()), "func")
            vals = [C.c_uint64(ptrs[i].value) for i in args]
            params = (C.c_void_p * len(vals))(*[C.cast(C.byref(v), C.c_void_p) for v in vals])
            ck(
                cu.cuLaunchKernel(
                    f,
                    grid[0],
                    grid[1],
                    grid[2],
                    block[0],
                    block[1],
                    block[2],
                    0,
                    None,
                    params,
                    None,
                ),
                "launch",
            )
        ck(cu.cuCtxSynchronize(), "sync")
        out = arrs[len(c["ins"]) - 1]
        ck(cu.cuMemcpyDtoH_v2(out.ctypes.data, ptrs[len(c["ins"]) - 1].value, out.nbytes), "dtoh")
        for p in ptrs:
            cu.cuMemFree_v2(p.value)
        err = float(np.abs(out.reshape(-1) - np.asarray(c["ref"]).reshape(-1)).max())
        res[c["name"]] = ("OK" if err < 1e-3 else "MISMATCH", err)
    except Exception as e:  # noqa
        res[c["name"]] = ("ERROR", str(e))
    print(c["name"], res[c["name"]], flush=True)
print("ALL_OK" if all(v[0] == "OK" for v in res.values()) else "FAILURES")
