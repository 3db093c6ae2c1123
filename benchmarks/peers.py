"""Inference engines over one templtune network, for ``benchmarks/inference.py``.

ONNX Runtime and OpenVINO load the ONNX file the network was imported from, when it was (a
user's model: the peers run the file a user deploys), or else the network (a
:mod:`templtune.graph` Function and its params) exported to ONNX with the same weights
(:func:`to_onnx`; batch-norm is already folded in the zoo, so each conv carries its bias).
PyTorch runs a zoo network eagerly op by op (:func:`network.torch_forward`); templtune builds
the network with ``relay.build``. Each engine is an :class:`Engine` whose ``prepare(threads)``
returns a zero-argument call computing the output for the fixed input, with the engine's own
thread setting. A missing package (or a network the engine cannot run) raises
:class:`EngineUnavailable` at construction so a caller can skip that engine.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from templtune import graph  # noqa: E402

Runner = Callable[[], np.ndarray]


class EngineUnavailable(RuntimeError):
    """Why the engine cannot run here, e.g. its package is not installed (the benchmark skips
    the engine)."""


# ---- ONNX export ---------------------------------------------------------------------------

def _consumers(net: graph.Function) -> dict[int, int]:
    count: dict[int, int] = {}
    for c in net.calls():
        for a in c.args:
            count[id(a)] = count.get(id(a), 0) + 1
    return count


def to_onnx(net: graph.Function, params: dict[str, np.ndarray], opset: int = 17) -> Any:
    """An ONNX ``ModelProto`` computing ``net`` (NCHW) with ``params`` as initializers.

    Covers the zoo's classifier ops: conv2d (grouped), bias_add (folded into the preceding
    Conv when it is that conv's only consumer), relu, add, max/global-average pooling,
    batch_flatten, dense and softmax.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    data = [v for v in net.params if v.name not in params]
    if len(data) != 1:
        raise ValueError(f"expected one input, got {[v.name for v in data]}")
    names: dict[int, str] = {id(v): v.name for v in net.params}
    inits = [numpy_helper.from_array(np.ascontiguousarray(params[v.name], np.float32), v.name)
             for v in net.params if v.name in params]
    users = _consumers(net)
    nodes: list[Any] = []
    deferred: dict[int, Any] = {}  # conv calls whose bias_add emits them

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    for k, c in enumerate(net.calls()):
        out = f"t{k}"
        names[id(c)] = out
        x = [names.get(id(a), "") for a in c.args]
        a = dict(c.attrs)
        if c.op == "nn.conv2d":
            if a["data_layout"] != "NCHW":
                raise ValueError("to_onnx: NCHW networks only")
            pt, pl, pb, pr = a["padding"]
            node = dict(inputs=x, pads=[pt, pl, pb, pr], strides=list(a["strides"]),
                        group=a["groups"], kernel_shape=list(c.args[1].shape[2:]))
            deferred[id(c)] = node
            continue
        if c.op == "nn.bias_add" and id(c.args[0]) in deferred and users[id(c.args[0])] == 1:
            node = deferred.pop(id(c.args[0]))
            nodes.append(helper.make_node("Conv", node.pop("inputs") + [x[1]], [out], **node))
            continue
        for pending in [i for i in c.args if id(i) in deferred]:
            node = deferred.pop(id(pending))
            nodes.append(helper.make_node("Conv", node.pop("inputs"), [names[id(pending)]],
                                          **node))
        if c.op == "nn.bias_add":
            bias = params[c.args[1].name].astype(np.float32)
            shape = [-1] + [1] * (len(c.args[0].shape) - 2) if len(c.args[0].shape) > 2 else [-1]
            x[1] = const(f"{c.args[1].name}_bcast", bias.reshape(shape))
            nodes.append(helper.make_node("Add", x, [out]))
        elif c.op in ("nn.relu", "add", "nn.global_avg_pool2d", "nn.batch_flatten"):
            op = {"nn.relu": "Relu", "add": "Add", "nn.global_avg_pool2d": "GlobalAveragePool",
                  "nn.batch_flatten": "Flatten"}[c.op]
            nodes.append(helper.make_node(op, x, [out]))
        elif c.op == "nn.max_pool2d":
            nodes.append(helper.make_node("MaxPool", x, [out],
                                          kernel_shape=list(a["pool_size"]),
                                          strides=list(a["strides"]), pads=list(a["padding"])))
        elif c.op == "nn.dense":
            nodes.append(helper.make_node("Gemm", x, [out], transB=1))
        elif c.op == "nn.softmax":
            nodes.append(helper.make_node("Softmax", x, [out], axis=a["axis"]))
        else:
            raise NotImplementedError(f"to_onnx: op {c.op}")
    for cid, node in deferred.items():  # a conv whose output is the network's (seed layer)
        nodes.append(helper.make_node("Conv", node.pop("inputs"), [names[cid]], **node))
    body = names[id(net.body)]
    used = {i for n in nodes for i in n.input}
    inits = [t for t in inits if t.name in used]  # a bias reshaped for broadcasting
    g = helper.make_graph(
        nodes, net.name,
        [helper.make_tensor_value_info(data[0].name, TensorProto.FLOAT, list(data[0].shape))],
        [helper.make_tensor_value_info(body, TensorProto.FLOAT, list(net.body.shape))], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 9)  # readable by older runtimes too
    onnx.checker.check_model(model)
    return model


# ---- engines -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Engine:
    """One engine over the network: ``prepare(threads)`` -> a call computing the output."""

    name: str
    prepare: Callable[[int], Runner]
    #: compared against the other engines with the f32 tolerance (False: reduced precision)
    gated: bool = True
    note: str = ""
    #: filled by ``prepare`` (OpenVINO: the precision it compiled for)
    extra: dict[str, Any] = field(default_factory=dict)


def templtune_engine(name: str, net: graph.Function, params: dict[str, np.ndarray],
                     x: np.ndarray, log: str | None = None) -> Engine:
    """``relay.build`` at ``opt_level=3`` under the packaged reference logs, plus ``log`` when
    given (AutoTVM or auto-scheduler records). ``prepare(threads)`` builds for that thread
    count (target ``-num-cores``), as an ONNX Runtime session is made for one: where records
    were timed at several counts, the build takes those of its own."""
    from templtune import auto_scheduler, autotvm
    from templtune.cli.log_format import LogFormat, survey
    from templtune.codegen.llvm.compile import default_num_threads
    from templtune.graph.transform import PassContext

    def build(target: str) -> graph.GraphExecutorFactoryModule:
        with contextlib.ExitStack() as stack:
            # NOTE: opt_level 3, as users build (NCHW[x]c convolutions, fused epilogues)
            stack.enter_context(PassContext(opt_level=3))
            if log is not None:
                fmt = survey(log).format
                if fmt is LogFormat.AUTO_SCHEDULER:
                    stack.enter_context(auto_scheduler.ApplyHistoryBest(log))
                elif fmt is LogFormat.AUTOTVM:
                    stack.enter_context(autotvm.apply_history_best(log))
                else:
                    raise ValueError(f"{log}: neither AutoTVM nor auto-scheduler records ({fmt})")
            return graph.build(net, target, params)

    first = build("llvm")
    libs = {default_num_threads(None): first}

    def prepare(threads: int) -> Runner:
        if threads not in libs:
            libs[threads] = build(f"llvm -num-cores={threads}")
        lib = libs[threads]
        module = graph.GraphModule(lib)
        module.set_input(next(v.name for v in net.params if v.name not in params), x)
        for cg in lib.groups:
            for kernel in cg.kernels:
                kernel.set_num_threads(threads)

        def run() -> np.ndarray:
            module.run()
            return module.get_output(0).numpy()
        return run

    note = f"{first.num_tuned} of {len(first.groups)} groups from records"
    return Engine(name, prepare, note=note)


def ort_engine(model: bytes | Path, x: np.ndarray, input_name: str) -> Engine:
    """ONNX Runtime, CPU execution provider, all graph optimizations (NCHWc included);
    ``model`` the serialized model or its file."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise EngineUnavailable("onnxruntime is not installed") from exc
    source = str(model) if isinstance(model, Path) else model

    def prepare(threads: int) -> Runner:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])
        return lambda: sess.run(None, {input_name: x})[0]

    return Engine(f"ONNX Runtime {ort.__version__}", prepare)


def openvino_engine(model: bytes | Path, x: np.ndarray, precision: str | None) -> Engine:
    """OpenVINO CPU plugin, latency hint, one stream; ``precision`` ``"f32"`` pins
    ``INFERENCE_PRECISION_HINT`` (None: the plugin's default, bf16 on AMX hosts); ``model``
    the serialized model or its file."""
    try:
        import openvino as ov
    except ImportError as exc:
        raise EngineUnavailable("openvino is not installed") from exc
    core = ov.Core()
    ov_model = core.read_model(str(model) if isinstance(model, Path) else _onnx_path(model))
    label: dict[str, str] = {}

    def prepare(threads: int) -> Runner:
        cfg = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
               "INFERENCE_NUM_THREADS": str(threads)}
        if precision is not None:
            cfg["INFERENCE_PRECISION_HINT"] = precision
        compiled = core.compile_model(ov_model, "CPU", cfg)
        hint = compiled.get_property("INFERENCE_PRECISION_HINT")
        label["precision"] = getattr(hint, "get_type_name", lambda: str(hint))()
        req = compiled.create_infer_request()

        def run() -> np.ndarray:
            req.infer({0: x})
            return np.array(req.get_output_tensor(0).data, copy=True)
        return run

    version = ov.__version__.split("-")[0]
    name = f"OpenVINO {version} " + (f"{precision} hint" if precision else "default precision")
    return Engine(name, prepare, gated=precision == "f32", extra=label)


_ONNX_FILES: dict[int, str] = {}


def _onnx_path(model_bytes: bytes) -> str:
    """A temporary file holding ``model_bytes`` (OpenVINO reads models from paths)."""
    import atexit
    import os
    import tempfile

    key = hash(model_bytes)
    if key not in _ONNX_FILES:
        f = tempfile.NamedTemporaryFile(suffix=".onnx", delete=False)
        f.write(model_bytes)
        f.close()
        _ONNX_FILES[key] = f.name
        atexit.register(os.unlink, f.name)
    return _ONNX_FILES[key]


def torch_engine(net: graph.Function, params: dict[str, np.ndarray], x: np.ndarray) -> Engine:
    """PyTorch eager (oneDNN convolutions), the network op by op."""
    try:
        import torch
    except ImportError as exc:
        raise EngineUnavailable("torch is not installed") from exc
    from network import torch_forward

    fwd = torch_forward(net, params)
    xt = torch.from_numpy(x)

    def prepare(threads: int) -> Runner:
        torch.set_num_threads(threads)

        def run() -> np.ndarray:
            with torch.no_grad():
                return fwd(xt).numpy()
        return run

    return Engine(f"PyTorch {torch.__version__.split('+')[0]} eager", prepare)


def peer_engines(net: graph.Function, params: dict[str, np.ndarray], x: np.ndarray,
                 names: tuple[str, ...] = ("ort", "openvino", "openvino-default", "torch"),
                 onnx_file: Path | None = None) -> tuple[list[Engine], list[str]]:
    """The installed peers among ``names``, and a line for each one skipped. ``onnx_file``:
    the file ``net`` was imported from, which the ONNX peers then load themselves."""
    input_name = next(v.name for v in net.params if v.name not in params)
    model: bytes | Path | None = onnx_file

    def onnx_model() -> bytes | Path:
        nonlocal model
        if model is None:  # exported once, for the first peer that needs it
            model = to_onnx(net, params).SerializeToString()
        return model

    def torch_peer() -> Engine:
        if onnx_file is not None:
            # NOTE: torch_forward maps the zoo's ops only (no layer_norm, batch_matmul ...)
            raise EngineUnavailable("runs zoo networks only")
        return torch_engine(net, params, x)

    makers: dict[str, Callable[[], Engine]] = {
        "ort": lambda: ort_engine(onnx_model(), x, input_name),
        "openvino": lambda: openvino_engine(onnx_model(), x, "f32"),
        "openvino-default": lambda: openvino_engine(onnx_model(), x, None),
        "torch": torch_peer,
    }
    unknown = [n for n in names if n not in makers]
    if unknown:
        raise ValueError(f"unknown engine(s) {', '.join(unknown)}; known: {', '.join(makers)}")
    engines, skipped = [], []
    for n in names:
        try:
            engines.append(makers[n]())
        except EngineUnavailable as exc:
            skipped.append(f"{n}: {exc}")
    return engines, skipped
