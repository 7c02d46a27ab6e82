"""Reproductions of the seed papers' figures and the peers comparison (issue 7).

Run them with ``dpgate experiments <name> --out DIR`` (see
:mod:`app.experiments.runner`): ``002-bestfit``, ``002-mae``, ``002-scaling``,
``002-staircase`` (:mod:`~app.experiments.paper002`), ``003-bounding``
(:mod:`~app.experiments.paper003`), ``004-clip-user``
(:mod:`~app.experiments.clip_user_figures`), ``004-capmetrics``
(:mod:`~app.experiments.capmetrics`), ``peers`` (:mod:`~app.experiments.peers`)
and ``all``. Simulations of dpgate's mechanisms draw their noise from
:class:`~app.experiments.noise.SeededNoise` (vectorised in
:mod:`~app.experiments.simulate`); this package is the only part of ``app`` that
creates sources of randomness.
"""
