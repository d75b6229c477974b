"""A griffe extension for the API reference: hnbench's docstrings cross-reference in Sphinx's roles
(:func:`hnbench.evaluate`, :class:`~hnbench.settings.EvalSettings`), which Markdown would show as written; each becomes
the code span of its target, as the docstring reads in an editor."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    """``:role:`target``` → ```target``` in every docstring of the objects the reference documents."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
