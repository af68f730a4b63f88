"""``python -m amp_hls.cli``: the same as the ``amp-hls`` console script."""

import sys

from . import console

sys.exit(console())
