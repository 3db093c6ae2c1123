"""The larger model zoo (ResNet-152, VGG, SqueezeNet, Inception v3, DenseNet, ResNet-3D) and the
operators it needs (concatenate, inference batch_norm, dropout as identity, conv3d, 3-D pools).

Structure checks count layers against the published architectures; each network is built for
llvm at a small image size and checked against the numpy interpreter (``graph.evaluate``).
"""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import graph, relay
from templtune.graph import nn
from templtune.graph import testing as zoo


def _count(net, op: str) -> int:
    return sum(c.op == op for c in net.calls())


def _build_and_check(net, params, rtol: float = 1e-4, atol: float = 1e-6) -> None:
    lib = graph.build(net, "llvm", params)
    x = np.random.default_rng(0).standard_normal(net.params[0].shape).astype("float32")
    m = graph.GraphModule(lib["default"](templtune.cpu()))
    m.set_input("data", x)
    m.run()
    want = graph.evaluate(net, params, data=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=rtol, atol=atol)
    np.testing.assert_allclose(want.sum(axis=1), 1.0, rtol=1e-4)  # a softmax output


# ----------------------------------------------------------------------------- operators
@pytest.mark.parametrize("k", [2, 3, 12])
def test_blocked_concatenate_branches_on_its_input(k: int) -> None:
    """A concatenation of blocked tensors: the vector loop picks the input a channel block
    comes from by one scalar condition (a branch, or for two inputs a select of loads clamped
    into their buffers): no lane-masked loads, whose masked-off addresses lie outside the
    buffers; and it matches numpy."""
    from templtune import te
    from templtune.build_module import build
    from templtune.graph.default_schedules import default_schedule
    from templtune.graph.op_zoo import _concat_compute
    from templtune.target import Target

    rng = np.random.default_rng(k)
    sizes = [1 + i % 3 for i in range(k)]
    xs = [te.placeholder((1, c, 3, 5, 16), name=f"x{i}") for i, c in enumerate(sizes)]
    out = _concat_compute(xs, {"axis": 1})
    tgt = Target("llvm -mcpu=skylake-avx512")
    mod = build(default_schedule([*xs, out], tgt), [*xs, out], "llvm")
    ir = mod.get_source("ll")
    assert "llvm.vector.reduce.or" not in ir and "llvm.masked" not in ir
    vals = [rng.standard_normal((1, c, 3, 5, 16)).astype("float32") for c in sizes]
    got = np.zeros((1, sum(sizes), 3, 5, 16), "float32")
    mod(*vals, got)
    np.testing.assert_array_equal(got, np.concatenate(vals, axis=1))


def test_concatenate_batch_norm_dropout_against_numpy() -> None:
    rng = np.random.default_rng(0)
    a = nn.var("data", (1, 3, 4, 5))
    b = nn.var("b", (1, 2, 4, 5))
    g, be, mu, var = (nn.var(n, (5,)) for n in ("g", "be", "mu", "var"))
    cat = relay.concatenate([a, b, a], axis=1)
    assert cat.shape == (1, 8, 4, 5)
    bn = nn.batch_norm(nn.dropout(cat, 0.5), g, be, mu, var, axis=3, epsilon=1e-3)
    net = relay.Function([a, b, g, be, mu, var], nn.relu(bn))
    params = {"b": rng.standard_normal((1, 2, 4, 5)).astype("float32"),
              "g": rng.random(5).astype("float32") + 0.5,
              "be": rng.standard_normal(5).astype("float32"),
              "mu": rng.standard_normal(5).astype("float32"),
              "var": rng.random(5).astype("float32") + 0.1}
    x = rng.standard_normal((1, 3, 4, 5)).astype("float32")
    c = np.concatenate([x, params["b"], x], axis=1)
    want = np.maximum((c - params["mu"]) * params["g"] / np.sqrt(params["var"] + 1e-3)
                      + params["be"], 0)
    np.testing.assert_allclose(relay.evaluate(net, params, data=x), want, rtol=1e-5, atol=1e-6)
    lib = relay.build(net, target="llvm", params=params)
    m = graph.GraphModule(lib["default"](templtune.cpu()))
    m.set_input("data", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-5, atol=1e-5)
    assert nn.dropout(a) is a
    with pytest.raises(graph.GraphError, match="differ off axis 1"):
        relay.concatenate([a, nn.var("c", (1, 2, 3, 5))], axis=1)
    with pytest.raises(graph.GraphError, match="rate"):
        nn.dropout(a, rate=1.0)


@pytest.mark.parametrize("opt_level", [2, 3])
def test_concatenate_takes_its_element_wise_followers(opt_level: int) -> None:
    """DenseNet's ``concat -> batch_norm -> relu`` runs as one kernel (the concatenation is
    never written out), while the convolutions feeding it keep their own groups (a template's
    output stage never sees a multi-input follower); plain (opt_level 2) and blocked (3) builds
    match numpy."""
    from templtune.graph.transform import PassContext

    rng = np.random.default_rng(0)
    x = nn.var("data", (1, 16, 8, 8))
    w1, w2 = (nn.var(f"w{k}", (16, 16, 3, 3)) for k in (1, 2))
    w4 = nn.var("w4", (8, 48, 1, 1))
    g, be, mu, var = (nn.var(n, (48,)) for n in ("g", "be", "mu", "var"))
    y1 = nn.relu(nn.conv2d(x, w1, padding=(1, 1)))
    y2 = nn.relu(nn.conv2d(y1, w2, padding=(1, 1)))
    cat = relay.concatenate([x, y1, y2], axis=1)
    act = nn.relu(nn.batch_norm(cat, g, be, mu, var, epsilon=1e-5))
    net = relay.Function([x, w1, w2, w4, g, be, mu, var], nn.conv2d(act, w4))
    params = {f"w{k}": (rng.standard_normal(s) * 0.2).astype("float32")
              for k, s in ((1, (16, 16, 3, 3)), (2, (16, 16, 3, 3)), (4, (8, 48, 1, 1)))}
    params |= {"g": rng.random(48).astype("float32") + 0.5,
               "be": rng.standard_normal(48).astype("float32"),
               "mu": rng.standard_normal(48).astype("float32"),
               "var": rng.random(48).astype("float32") + 0.1}
    with PassContext(opt_level=opt_level):
        lib = graph.build(net, "llvm -num-cores=1", params)
    names = [cg.group.name for cg in lib.groups]
    cat_groups = [n for n in names if "concatenate" in n]
    assert len(cat_groups) == 1 and cat_groups[0].startswith("fused_concatenate")
    assert cat_groups[0].endswith("nn_relu"), names
    data = rng.standard_normal((1, 16, 8, 8)).astype("float32")
    m = graph.GraphModule(lib)
    m.set_input("data", data)
    m.run()
    want = graph.evaluate(net, params, data=data)
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-5)


def test_3d_operators_against_brute_force() -> None:
    from templtune.graph.op import get_op

    rng = np.random.default_rng(0)
    d = rng.standard_normal((1, 3, 5, 6, 7)).astype("float32")
    w = rng.standard_normal((4, 3, 3, 3, 3)).astype("float32")
    got = get_op("nn.conv3d").reference([d, w], {"strides": (1, 2, 1), "padding": (1,) * 6})
    p = np.pad(d, [(0, 0), (0, 0), (1, 1), (1, 1), (1, 1)]).astype(np.float64)
    want = np.zeros(got.shape)
    for o, z, y, x in np.ndindex(*want.shape[1:]):
        want[0, o, z, y, x] = (p[0, :, z:z + 3, 2 * y:2 * y + 3, x:x + 3] * w[o]).sum()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # the average excludes padding: nanmean over a NaN-padded input
    a = {"pool_size": (2, 2, 2), "strides": (1, 1, 1), "padding": (0, 1, 1, 1, 0, 0)}
    got = get_op("nn.avg_pool3d").reference([d], a)
    q = np.pad(d.astype(np.float64), [(0, 0), (0, 0), (0, 1), (1, 0), (1, 0)],
               constant_values=np.nan)
    want = np.zeros(got.shape)
    for c, z, y, x in np.ndindex(*want.shape[1:]):
        want[0, c, z, y, x] = np.nanmean(q[0, c, z:z + 2, y:y + 2, x:x + 2])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # compiled kernels of all four ops match the references
    xv, wv = nn.var("data", d.shape), nn.var("w", w.shape)
    y = nn.max_pool3d(nn.relu(nn.conv3d(xv, wv, strides=(1, 2, 1), padding=1)), 3, 2, 1)
    out = nn.global_avg_pool3d(nn.avg_pool3d(y, 2, 1, (0, 1, 1, 1, 0, 0)))
    net = relay.Function([xv, wv], out)
    m = graph.GraphModule(relay.build(net, "llvm", {"w": w})["default"](templtune.cpu()))
    m.set_input("data", d)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), graph.evaluate(net, {"w": w}, data=d),
                               rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- structure
def test_zoo_layer_counts_small_networks() -> None:
    vgg16, _ = zoo.vgg.get_workload(num_layers=16, image_shape=(3, 32, 32))
    assert (_count(vgg16, "nn.conv2d"), _count(vgg16, "nn.dense")) == (13, 3)
    sq, _ = zoo.squeezenet.get_workload(version="1.1", image_shape=(3, 64, 64))
    assert (_count(sq, "nn.conv2d"), _count(sq, "concatenate")) == (1 + 8 * 3 + 1, 8)
    r3d, _ = zoo.resnet3d.get_workload(18, image_shape=(3, 4, 16, 16))
    assert _count(r3d, "nn.conv3d") == 1 + 16 + 3
    assert _count(r3d, "nn.max_pool3d") == 0  # small frames: no stem pool (as Relay's)
    r3d_big, _ = zoo.resnet3d.get_workload(18, image_shape=(3, 4, 64, 64))
    assert (_count(r3d_big, "nn.conv3d"), _count(r3d_big, "nn.max_pool3d")) == (20, 1)
    for net in (vgg16, sq, r3d, r3d_big):
        assert net.body.shape == (1, 1000)


@pytest.mark.slow
def test_zoo_layer_counts_large_networks() -> None:
    r152, _ = zoo.resnet.get_workload(152, image_shape=(3, 32, 32))
    assert _count(r152, "nn.conv2d") == 1 + 3 * (3 + 8 + 36 + 3) + 4
    inc, _ = zoo.inception_v3.get_workload(image_shape=(3, 75, 75))
    assert (_count(inc, "nn.conv2d"), _count(inc, "concatenate")) == (94, 11)
    d121, _ = zoo.densenet.get_workload(121, image_shape=(3, 32, 32))
    # 121 = stem conv + 2 per dense layer + 3 transitions + the classifier
    assert _count(d121, "nn.conv2d") + _count(d121, "nn.dense") == 121
    for net in (r152, inc, d121):
        assert net.body.shape == (1, 1000)


def test_get_network_names() -> None:
    # NOTE: VGG at 224x224 has a 4096 x 25088 fc6 weight; 32x32 keeps the test light
    for name, image, ishape in [("squeezenet_v1.1", None, (1, 3, 224, 224)),
                                ("inception_v3", None, (1, 3, 299, 299)),
                                ("vgg-11", (3, 32, 32), (1, 3, 32, 32)),
                                ("densenet-121", None, (1, 3, 224, 224)),
                                ("resnet-152", None, (1, 3, 224, 224)),
                                ("resnet3d-18", None, (1, 3, 16, 112, 112))]:
        net, params, input_shape, output_shape = zoo.get_network(name, image_shape=image)
        assert (input_shape, output_shape) == (ishape, (1, 1000)), name
        assert set(params) == {v.name for v in net.params[1:]}
    with pytest.raises(graph.GraphError, match="NCHW only"):
        zoo.get_network("inception_v3", layout="NHWC")
    with pytest.raises(graph.GraphError, match="unknown network"):
        zoo.get_network("alexnet")


# ----------------------------------------------------------------------------- build vs numpy
@pytest.mark.slow
@pytest.mark.parametrize("name, make", [
    ("squeezenet_v1.1", lambda: zoo.squeezenet.get_workload(version="1.1",
                                                             image_shape=(3, 64, 64))),
    ("squeezenet_v1.0", lambda: zoo.squeezenet.get_workload(version="1.0",
                                                             image_shape=(3, 64, 64))),
    ("vgg-11", lambda: zoo.vgg.get_workload(num_layers=11, image_shape=(3, 32, 32))),
    ("inception_v3", lambda: zoo.inception_v3.get_workload(image_shape=(3, 75, 75))),
    ("densenet-121", lambda: zoo.densenet.get_workload(121, image_shape=(3, 32, 32))),
    ("resnet-152", lambda: zoo.resnet.get_workload(152, image_shape=(3, 32, 32))),
    ("resnet3d-18", lambda: zoo.resnet3d.get_workload(18, image_shape=(3, 4, 16, 16))),
])
def test_zoo_network_builds_and_matches_numpy(name, make) -> None:
    net, params = make()
    _build_and_check(net, params)
