"""tolk_core.onnx.load: the forms a model and its inputs come in, the named error listing every unsupported op,
opset semantics (Softmax before and from opset 13), shape computations folded on the host, serving several
batch sizes and running under tolk_core.jit. References: numpy and hand-computed values."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tolk_core
import tolk_core.onnx
from tolk_core.counters import GlobalCounters
from tolk_core.errors import ArgumentError, UnsupportedError, UnsupportedOnnxOpError
from tolk_core.frontend.tensor import Tensor


def make(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, shape, dt=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dt, shape)


def linear_model(opset=17):
    """y = relu(x @ W + b), W (3, 2) and b (2,) initializers; x has a symbolic batch dimension."""
    w = np.arange(6, dtype=np.float32).reshape(3, 2) / 10
    b = np.array([0.5, -1.0], np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    model = make(nodes, [vi("x", ["batch", 3])], [vi("y", ["batch", 2])],
                 [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")], opset)
    return model, lambda x: np.maximum(x @ w + b, 0)


def test_inputs_by_name_position_and_dict_outputs_in_graph_order():
    model, ref = linear_model()
    m = tolk_core.onnx.load(model)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    for out in (m(x=x), m({"x": x}), m(x), m(Tensor(x))):
        assert list(out) == ["y"]
        np.testing.assert_allclose(out["y"].numpy(), ref(x), rtol=1e-6)
    assert m.input_names == ["x"] and m.output_names == ["y"]
    with pytest.raises(ArgumentError, match="missing: x"):
        m(z=x)


def test_load_from_bytes_and_path_with_external_data(tmp_path):
    model, ref = linear_model()
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(tolk_core.onnx.load(model.SerializeToString())(x)["y"].numpy(), ref(x), rtol=1e-6)
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").stat().st_size == 4 * 8  # the weights really live outside the model
    np.testing.assert_allclose(tolk_core.onnx.load(path)(x)["y"].numpy(), ref(x), rtol=1e-6)


def test_every_unsupported_op_named_in_one_error():
    nodes = [helper.make_node("Foo", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Bar", ["b"], ["c"]), helper.make_node("Foo", ["c"], ["y"]),
             helper.make_node("LinearRegressor", ["y"], ["z"], domain="ai.onnx.ml")]
    model = make(nodes, [vi("x", [2])], [vi("z", [2])])
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    with pytest.raises(UnsupportedOnnxOpError) as e:
        tolk_core.onnx.load(model)
    assert e.value.ops == (("Foo", 17), ("Bar", 17), ("ai.onnx.ml.LinearRegressor", 3))
    assert "Foo (opset 17), Bar (opset 17), ai.onnx.ml.LinearRegressor (opset 3)" in str(e.value)
    assert isinstance(e.value, UnsupportedError)


def test_opset_outside_range_is_named():
    model, _ = linear_model(opset=tolk_core.onnx.MAX_OPSET + 1)
    with pytest.raises(UnsupportedOnnxOpError, match=f"declares opset {tolk_core.onnx.MAX_OPSET + 1}"):
        tolk_core.onnx.load(model)


def test_softmax_axis_means_different_things_before_and_from_opset_13():
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)

    def softmax(v, axis):
        e = np.exp(v - v.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)
    got11 = tolk_core.onnx.load(make([node], [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])], opset=11))(x)["y"]
    got13 = tolk_core.onnx.load(make([node], [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])], opset=13))(x)["y"]
    # opset 11: the input flattened to (2, 12) at axis 1, one softmax over each row of 12
    np.testing.assert_allclose(got11.numpy(), softmax(x.reshape(2, 12), 1).reshape(2, 3, 4), rtol=1e-5)
    np.testing.assert_allclose(got13.numpy(), softmax(x, 1), rtol=1e-5)
    assert not np.allclose(got11.numpy(), got13.numpy())


def shape_subgraph_model():
    """y = reshape(x, concat(shape(x)[0:1], [-1])): the flatten an exporter writes with a dynamic batch."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0, np.int64))),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["f"]),
             helper.make_node("Mul", ["f", "two"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "ax"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    return make(nodes, [vi("x", ["batch", 2, 3])], [vi("y", ["batch", 6])], inits)


def test_shape_computations_fold_on_the_host():
    m = tolk_core.onnx.load(shape_subgraph_model())
    x = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    before = GlobalCounters.kernels_launched
    y = m(x)["y"].numpy()
    # one kernel: the Mul of the reshaped input; Shape/Gather/Unsqueeze/Concat ran on the host
    assert GlobalCounters.kernels_launched - before == 1
    np.testing.assert_array_equal(y, x.reshape(4, 6) * 2)


def test_batch_sizes_compile_once_each():
    """A symbolic batch dimension is served at every size: the converters see static shapes, so a new batch
    size compiles its kernels once, and a size served before compiles nothing."""
    m = tolk_core.onnx.load(shape_subgraph_model())
    rng = np.random.default_rng(2)
    compiled = []
    for b in (3, 5, 3, 5):
        x = rng.standard_normal((b, 2, 3)).astype(np.float32)
        before = GlobalCounters.kernels_compiled
        np.testing.assert_allclose(m(x=x)["y"].numpy(), x.reshape(b, 6) * 2, rtol=1e-6)
        compiled.append(GlobalCounters.kernels_compiled - before)
    assert compiled[2:] == [0, 0]


def test_symbolic_batch_compiles_once_for_every_size():
    """An input whose batch dimension is a bound Variable: the kernels are compiled for the variable, so other
    batch sizes run them again without compiling."""
    model, ref = linear_model()
    m = tolk_core.onnx.load(model)
    full = np.random.default_rng(4).standard_normal((8, 3)).astype(np.float32)
    storage = Tensor(full).realize()
    batch = tolk_core.Variable("batch", 1, 8)
    compiled = []
    for b in (2, 5, 7):
        before = GlobalCounters.kernels_compiled
        y = m(x=storage.shrink(((0, batch.bind(b)), None)))["y"].numpy()
        compiled.append(GlobalCounters.kernels_compiled - before)
        np.testing.assert_allclose(y, ref(full[:b]), rtol=1e-6)
    assert compiled[1:] == [0, 0]


def test_runs_under_jit():
    model, ref = linear_model()
    m = tolk_core.onnx.load(model)

    @tolk_core.jit
    def step(x: Tensor) -> Tensor:
        return m(x=x)["y"]
    rng = np.random.default_rng(3)
    for _ in range(4):  # warm-up, capture, then replays
        x = rng.standard_normal((2, 3)).astype(np.float32)
        np.testing.assert_allclose(step(Tensor(x)).numpy(), ref(x), rtol=1e-6)
