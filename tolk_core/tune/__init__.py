"""tune: a defensive search over the optimizer's own choices, and its results cached per machine
(docs/tuning.md). `search` holds the search logic (interleaved timing against the current best, acceptance
past a margin and the measured noise, output checks, wall-time caps); `cache` the results on disk, keyed by
kernel, device, renderer, compiler identity, CPU model and Tolk version."""
