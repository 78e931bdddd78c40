"""Backend conformance suite for plugin authors, shipped with tolk-core.

    pytest --pyargs tolk_core.testing --tolk-device MYDEV

`plugin` is the pytest plugin (entry point ``pytest11``; inert without ``--tolk-device``), the ``test_*`` modules
are the tiers, `checks` holds the contract checks as plain functions (``tolk devices --check`` runs their
smoke subset without pytest), `kernels` builds core-generated kernels and runs them through nothing but a
device's own contracts, and `programs` is the end-to-end program table with numpy references. See
docs/plugins.md §8.
"""
