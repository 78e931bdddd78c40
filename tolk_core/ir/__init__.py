"""The IR: dtypes, ops, hash-consed UOps, pattern matching, symbolic integers, movement maths, specs."""
from tolk_core.ir.dtype import (
    AddrSpace,
    DType,
    PtrDType,
    dtypes,
    least_upper_dtype,
    promote_types,
    sum_acc_dtype,
    weak_promote,
)
from tolk_core.ir.ops import AxisType, GroupOp, Op
from tolk_core.ir.pattern import PatternMatcher, UPat, graph_rewrite, rewrite_stats
from tolk_core.ir.shape import apply_movement_op, movement_shape
from tolk_core.ir.symbolic import symbolic
from tolk_core.ir.uop import UOp, Variable, prod, resolve, sint, smax, smin, ssimplify, sym_eq

__all__ = ["AddrSpace", "DType", "PtrDType", "dtypes", "least_upper_dtype", "promote_types", "sum_acc_dtype",
           "weak_promote", "AxisType", "GroupOp", "Op", "PatternMatcher", "UPat", "graph_rewrite", "rewrite_stats",
           "apply_movement_op", "movement_shape", "symbolic", "UOp", "Variable", "prod", "resolve", "sint", "smax",
           "smin", "ssimplify", "sym_eq"]
