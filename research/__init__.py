"""Reproductions of the seed papers' figures and the peers comparison (issue 7).

Not part of the service: this package ships beside ``app`` but its libraries
(matplotlib, tqdm) come only with the ``research`` extra, ``pip install -e
'.[research]'`` (and the peer libraries with ``.[peers]``). Run it with ``python -m
research <name> --out DIR`` or ``dpgate experiments <name> --out DIR`` (see
:mod:`research.runner`): ``002-bestfit``, ``002-mae``, ``002-scaling``,
``002-staircase`` (:mod:`~research.paper002`), ``003-bounding``
(:mod:`~research.paper003`), ``004-clip-user`` (:mod:`~research.clip_user_figures`),
``004-capmetrics`` (:mod:`~research.capmetrics`), ``peers`` (:mod:`~research.peers`)
and ``all``. Simulations of dpgate's mechanisms draw their noise from
:class:`~research.noise.SeededNoise` (vectorised in :mod:`~research.simulate`).

This module imports nothing heavy, so ``dpgate`` can build its parser and say what
is missing without the extra installed.
"""

from __future__ import annotations

import importlib

__all__ = ["INSTALL_HINT", "REQUIRED", "missing_dependencies"]

#: Libraries of the ``research`` extra that the experiments import.
REQUIRED = ("matplotlib", "tqdm")
INSTALL_HINT = "the experiments need the research extra: pip install -e '.[research]'"


def missing_dependencies() -> list[str]:
    """The libraries of :data:`REQUIRED` that cannot be imported here."""
    missing = []
    for name in REQUIRED:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing
