"""Block-sparse dense in networks: nn.sparse_dense, relay.data_dep_optimization and
topi.sparse.utils.convert_model_dense_to_sparse (TVM's tune_network_x86, use_sparse=True)."""

from __future__ import annotations

import numpy as np
import pytest

import templtune
from templtune import relay
from templtune.graph.op import GraphError, make_call
from templtune.graph.reference import evaluate
from templtune.relay import data_dep_optimization as ddo
from templtune.topi.sparse.utils import convert_model_dense_to_sparse, random_bsr_matrix


def _run(func, params, **inputs) -> np.ndarray:
    lib = relay.build(func, target="llvm", params=params)
    m = relay.GraphModule(lib["default"](templtune.cpu()))
    for k, v in inputs.items():
        m.set_input(k, v)
    m.run()
    return m.get_output(0).numpy()


def _mlp(rng: np.random.Generator, w1: np.ndarray):
    x = relay.var("data", (3, 16))
    a = relay.var("w1", (32, 16))
    b = relay.var("b1", (32,))
    c = relay.var("w2", (8, 32))
    y = relay.nn.dense(relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, a), b)), c)
    func = relay.Function([x, a, b, c], y)
    params = {"w1": w1, "b1": rng.standard_normal(32).astype("float32"),
              "w2": rng.standard_normal((8, 32)).astype("float32")}
    return func, params


def test_bsr_dense_convert_keeps_the_output():
    rng = np.random.default_rng(0)
    w1 = random_bsr_matrix(32, 16, 4, 2, 0.1, "float32", rng=rng).todense()
    func, params = _mlp(rng, w1)
    sfunc, sparams = ddo.bsr_dense.convert(func, params, (4, 2), sparsity_threshold=0.85)
    assert [c.op for c in sfunc.calls()].count("nn.sparse_dense") == 1
    assert [c.op for c in sfunc.calls()].count("nn.dense") == 1        # w2 is dense: kept
    assert "w1" not in sparams and {"w1.data", "w1.indices", "w1.indptr"} <= set(sparams)
    assert sparams["w1.indices"].dtype == np.int32
    x = rng.standard_normal((3, 16)).astype("float32")
    want = evaluate(func, params, data=x)
    np.testing.assert_allclose(evaluate(sfunc, sparams, data=x), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_run(sfunc, sparams, data=x), want, rtol=1e-4, atol=1e-4)


def test_below_threshold_is_not_converted():
    rng = np.random.default_rng(1)
    func, params = _mlp(rng, rng.standard_normal((32, 16)).astype("float32"))
    sfunc, sparams = ddo.bsr_dense.convert(func, params, (4, 1), sparsity_threshold=0.85)
    assert "nn.sparse_dense" not in [c.op for c in sfunc.calls()]
    assert set(sparams) == set(params)


def test_simplify_fc_transpose_folds_the_weight():
    rng = np.random.default_rng(2)
    x = relay.var("data", (2, 6))
    w = relay.var("w", (6, 5))
    func = relay.Function([x, w], relay.nn.dense(x, make_call("transpose", [w], axes=(1, 0))))
    params = {"w": rng.standard_normal((6, 5)).astype("float32")}
    sfunc, sparams = ddo.simplify_fc_transpose.convert(func, params)
    assert [c.op for c in sfunc.calls()] == ["nn.dense"]
    assert set(sparams) == {"w.T"} and sparams["w.T"].shape == (5, 6)
    xv = rng.standard_normal((2, 6)).astype("float32")
    np.testing.assert_allclose(evaluate(sfunc, sparams, data=xv), xv @ params["w"], rtol=1e-5)


def test_convert_model_dense_to_sparse_random_params():
    rng = np.random.default_rng(3)
    func, params = _mlp(rng, rng.standard_normal((32, 16)).astype("float32"))
    sfunc, sparams = convert_model_dense_to_sparse(func, params, bs_r=4, random_params=True)
    assert [c.op for c in sfunc.calls()].count("nn.sparse_dense") == 2
    blocks = sparams["w1.data"]
    assert blocks.shape[1:] == (4, 1) and blocks.shape[0] < 0.2 * (32 // 4) * 16
    x = rng.standard_normal((3, 16)).astype("float32")
    np.testing.assert_allclose(_run(sfunc, sparams, data=x), evaluate(sfunc, sparams, data=x),
                               rtol=1e-4, atol=1e-4)


def test_sparse_dense_builder_checks_index_dtype():
    x = relay.var("x", (2, 4))
    d = relay.var("d", (1, 2, 2))
    with pytest.raises(GraphError, match="int32"):
        relay.nn.sparse_dense(x, (d, relay.var("i", (1,), "int64"),
                                  relay.var("p", (2,), "int32")))


@pytest.mark.slow
def test_resnet18_small_image_sparse_builds_and_matches_numpy():
    mod, params = relay.testing.resnet.get_workload(num_layers=18, batch_size=1,
                                                    image_shape=(3, 16, 16), num_classes=16)
    smod, sparams = convert_model_dense_to_sparse(mod, params, bs_r=4, random_params=True)
    assert "nn.sparse_dense" in [c.op for c in smod["main"].calls()]
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype("float32")
    np.testing.assert_allclose(_run(smod, sparams, data=x), evaluate(smod, sparams, data=x),
                               rtol=1e-4, atol=1e-5)
