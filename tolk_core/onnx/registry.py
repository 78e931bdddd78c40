"""The converter table: ONNX op name -> the forms of the op, each with the opset version it begins at
(docs/onnx.md, "Opsets"). A node is converted by the form with the largest beginning at or below its opset;
a node whose opset lies before every form is unsupported. Where one function serves several forms it reads
`node.opset` itself (Softmax's axis, Reduce*'s axes, Split/Squeeze/Unsqueeze/Clip/Pad/Slice inputs); the
table still lists where each form begins, so `supported` answers for every version.

An op of another domain than ONNX's default is keyed by its qualified name (`domain.Op`), its opset that
domain's. The table is a literal: nothing registers itself at import."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from tolk_core.onnx import ops_elementwise as E
from tolk_core.onnx import ops_index as I
from tolk_core.onnx import ops_nn as N
from tolk_core.onnx import ops_reduce as R
from tolk_core.onnx import ops_resize as Z
from tolk_core.onnx import ops_sequence as Q
from tolk_core.onnx import ops_shape as S
from tolk_core.onnx import ops_string as STR
from tolk_core.onnx import ops_training as T
from tolk_core.onnx.context import Ctx, Node, Value

Converter = Callable[[Ctx, Node, list[Value | None]], "Value | Sequence[Value | None]"]

# the opsets a model may declare for the default domain
MIN_OPSET, MAX_OPSET = 1, 28


def _one(fn: Converter, since: int = 1) -> tuple[tuple[int, Converter], ...]:
    return ((since, fn),)


def _forms(fn: Converter, *since: int) -> tuple[tuple[int, Converter], ...]:
    """One function serving the forms that begin at each of `since` (it reads node.opset)."""
    return tuple((s, fn) for s in since)


_UNARY = {"Abs": "abs", "Neg": "__neg__", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
          "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan",
          "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh", "Tanh": "tanh",
          "Sigmoid": "sigmoid", "Erf": "erf", "Floor": "floor", "Ceil": "ceil", "Relu": "relu", "Round": "round",
          "Sign": "sign", "IsNaN": "isnan", "HardSwish": "hardswish", "Softsign": "softsign", "Mish": "mish"}

CONVERTERS: dict[str, tuple[tuple[int, Converter], ...]] = {
    **{op: _one(E.method(name)) for op, name in _UNARY.items()},
    "Add": _one(E.binary(lambda a, b: a + b)), "Sub": _one(E.binary(lambda a, b: a - b)),
    "Mul": _one(E.binary(lambda a, b: a * b)), "Div": _one(E.binary(E.div)),
    "Pow": _one(E.binary(E.power)), "Mod": _one(E.mod, 10), "BitShift": _one(E.bitshift, 11),
    "And": _one(E.logical("logical_and")), "Or": _one(E.logical("logical_or")),
    "Xor": _one(E.logical("logical_xor")), "Not": _one(E.not_),
    "Equal": _one(STR.equal), "Greater": _one(E.binary(lambda a, b: a > b)),
    "GreaterOrEqual": _one(E.binary(lambda a, b: a >= b), 12), "Less": _one(E.binary(lambda a, b: a < b)),
    "LessOrEqual": _one(E.binary(lambda a, b: a <= b), 12),
    "Max": _one(E.variadic(lambda a, b: a.maximum(b))), "Min": _one(E.variadic(lambda a, b: a.minimum(b))),
    "Sum": _one(E.variadic(lambda a, b: a + b)), "Mean": _one(E.mean),
    "Where": _one(E.where, 9), "Clip": _forms(E.clip, 1, 11), "Cast": _one(E.cast, 6),
    "CastLike": _one(E.cast_like, 15), "IsInf": _one(E.isinf, 10), "Gelu": _one(E.gelu, 20),
    "Elu": _one(E.elu), "Selu": _one(E.selu), "Celu": _one(E.celu, 12), "LeakyRelu": _one(E.leaky_relu),
    "HardSigmoid": _one(E.hard_sigmoid), "Softplus": _one(E.softplus), "PRelu": _one(E.prelu),
    "ThresholdedRelu": _one(E.thresholded_relu, 10), "Identity": _one(E.identity), "Dropout": _one(E.dropout),
    "ReduceSum": _forms(R.reduction(R.r_sum, 13), 1, 13), "ReduceMean": _forms(R.reduction(R.r_mean), 1, 18),
    "ReduceMax": _forms(R.reduction(R.r_max), 1, 18), "ReduceMin": _forms(R.reduction(R.r_min), 1, 18),
    "ReduceProd": _forms(R.reduction(R.r_prod), 1, 18), "ReduceL1": _forms(R.reduction(R.r_l1), 1, 18),
    "ReduceL2": _forms(R.reduction(R.r_l2), 1, 18), "ReduceSumSquare": _forms(R.reduction(R.r_sum_square), 1, 18),
    "ReduceLogSum": _forms(R.reduction(R.r_log_sum), 1, 18),
    "ReduceLogSumExp": _forms(R.reduction(R.r_log_sum_exp), 1, 18),
    "ArgMax": _one(R.arg_reduce(True)), "ArgMin": _one(R.arg_reduce(False)),
    "Softmax": _forms(R.softmax_like(False), 1, 13), "LogSoftmax": _forms(R.softmax_like(True), 1, 13),
    "Hardmax": _one(R.hardmax, 13),
    "Shape": _forms(S.shape, 1, 15), "Size": _one(S.size), "Constant": _one(S.constant),
    "ConstantOfShape": _one(S.constant_of_shape, 9), "Range": _one(S.range_, 11),
    "Reshape": _forms(S.reshape, 1, 5, 14), "Flatten": _one(S.flatten), "Transpose": _one(S.transpose),
    "Squeeze": _forms(S.squeeze, 1, 13), "Unsqueeze": _forms(S.unsqueeze, 1, 13), "Concat": _forms(S.concat, 1, 4),
    "Split": _forms(S.split, 2, 13, 18), "Slice": _forms(S.slice_, 1, 10), "Expand": _one(S.expand, 8),
    "Tile": _one(S.tile, 6), "Pad": _forms(S.pad, 2, 11, 18), "DepthToSpace": _one(S.depth_to_space),
    "SpaceToDepth": _one(S.space_to_depth), "Trilu": _one(S.trilu, 14), "EyeLike": _one(S.eye_like, 9),
    "Gather": _one(I.gather), "GatherElements": _one(I.gather_elements, 11), "GatherND": _one(I.gather_nd, 11),
    "ScatterElements": _one(I.scatter_elements, 11), "ScatterND": _one(I.scatter_nd, 11),
    "OneHot": _one(I.one_hot, 9), "TopK": _forms(I.topk, 1, 10), "CumSum": _one(I.cumsum, 11),
    "Einsum": _one(I.einsum, 12), "ReverseSequence": _one(I.reverse_sequence, 10), "NonZero": _one(I.nonzero, 9),
    "Conv": _one(N.conv), "ConvTranspose": _one(N.conv_transpose), "MaxPool": _one(N.max_pool),
    "AveragePool": _one(N.avg_pool), "GlobalAveragePool": _one(N.global_pool(False)),
    "GlobalMaxPool": _one(N.global_pool(True)), "BatchNormalization": _one(N.batch_norm),
    "InstanceNormalization": _one(N.instance_norm), "LayerNormalization": _one(N.layer_norm, 17),
    "GroupNormalization": _forms(N.group_norm, 18, 21), "Gemm": _one(N.gemm), "MatMul": _one(N.matmul),
    "LRN": _one(N.lrn), "RMSNormalization": _one(N.rms_norm, 23), "LpNormalization": _one(N.lp_norm),
    "MeanVarianceNormalization": _one(N.mean_variance_norm, 9), "Swish": _one(E.swish, 24),
    "StringNormalizer": _one(STR.string_normalizer, 10), "StringConcat": _one(STR.string_concat, 20),
    "StringSplit": _one(STR.string_split, 20),
    "Resize": _forms(Z.resize, 10, 11, 13, 18, 19), "Upsample": _forms(Z.upsample, 7, 9), "Shrink": _one(E.shrink, 9),
    "SequenceConstruct": _one(Q.construct, 11), "SequenceEmpty": _one(Q.empty, 11),
    "SequenceInsert": _one(Q.insert, 11), "SequenceAt": _one(Q.at, 11), "SequenceErase": _one(Q.erase, 11),
    "SequenceLength": _one(Q.length, 11), "ConcatFromSequence": _one(Q.concat_from_sequence, 11),
    "SplitToSequence": _one(Q.split_to_sequence, 11), "Optional": _one(Q.optional, 15),
    "OptionalHasElement": _one(Q.optional_has_element, 15), "OptionalGetElement": _one(Q.optional_get_element, 15),
    "ai.onnx.preview.training.Gradient": _one(T.gradient),
}


def lookup(op: str, opset: int) -> Converter | None:
    """The converter of `op` at `opset`, or None where no form of it begins at or below that opset."""
    best = None
    for since, fn in CONVERTERS.get(op, ()):
        if since <= opset:
            best = fn
    return best
