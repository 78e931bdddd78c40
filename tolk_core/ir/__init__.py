"""The IR: dtypes, ops, hash-consed UOps, pattern matching, symbolic integers, movement maths."""
