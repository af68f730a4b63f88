"""The one Jinja environment every generator uses: strict, so a missing value is an error."""

from __future__ import annotations

from functools import lru_cache

import jinja2

from ..resources import templates_dir


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # C++/SV/tcl, not HTML; user names are validated identifiers instead
    )
