"""``python -m tolk_core`` runs the ``tolk`` CLI."""
import sys

from tolk_core.cli import main

sys.exit(main())
