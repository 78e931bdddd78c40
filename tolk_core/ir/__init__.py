"""The IR: dtypes, ops, hash-consed UOps, pattern matching, symbolic integers, movement maths."""
from tolk_core.ir.dtype import AddrSpace, DType, PtrDType, dtypes, least_upper_dtype, promote_types, sum_acc_dtype
from tolk_core.ir.ops import GroupOp, Op
from tolk_core.ir.pattern import PatternMatcher, UPat, graph_rewrite, rewrite_stats
from tolk_core.ir.uop import UOp, Variable, resolve, sint, smax, smin, ssimplify

__all__ = ["AddrSpace", "DType", "PtrDType", "dtypes", "least_upper_dtype", "promote_types", "sum_acc_dtype",
           "GroupOp", "Op", "PatternMatcher", "UPat", "graph_rewrite", "rewrite_stats", "UOp", "Variable",
           "resolve", "sint", "smax", "smin", "ssimplify"]
