"""The numeric core of dpgate: pure functions over numpy arrays.

Nothing in this package imports a web framework or a database driver.
"""

from app.core.data.grid import GridData
from app.core.data.results import Plan, Release, VectorRelease
from app.core.engine.batch import PendingBatch, ReleaseBatch, finish_batch
from app.core.engine.expected_width import expected_ci95_width, expected_ci95_widths
from app.core.engine.many_grids import GridError, start_many
from app.core.engine.quote import quote_epsilon
from app.core.engine.single_grid import (
    PendingRelease,
    finish_releases,
    plan,
    plan_joint,
    plan_mean,
    plan_variance,
    release,
    release_joint,
    release_mean,
    release_variance,
    start_releases,
)
from app.core.engine.user_mean_batch import expected_user_mean_widths, start_user_mean_releases
from app.core.mechanisms.auto import auto_epsilon, expected_error, expected_errors
from app.core.mechanisms.option_spec import MechanismSpec, OptionSpec
from app.core.mechanisms.registry import (
    JOINT_MECHANISMS,
    MEAN_MECHANISMS,
    USER_MEAN_MECHANISMS,
    VARIANCE_MECHANISMS,
    canonical_mechanism,
    mechanisms,
    validate_options,
)
from app.core.mechanisms.wco_d import worst_case_optimal_d
from app.core.noise.laplace import NoiseSource, OpenDPNoise, calibrate_scale, default_noise

__all__ = [
    "JOINT_MECHANISMS",
    "MEAN_MECHANISMS",
    "USER_MEAN_MECHANISMS",
    "VARIANCE_MECHANISMS",
    "GridData",
    "GridError",
    "MechanismSpec",
    "NoiseSource",
    "OpenDPNoise",
    "OptionSpec",
    "PendingBatch",
    "PendingRelease",
    "Plan",
    "Release",
    "ReleaseBatch",
    "VectorRelease",
    "auto_epsilon",
    "calibrate_scale",
    "canonical_mechanism",
    "default_noise",
    "expected_ci95_width",
    "expected_ci95_widths",
    "expected_error",
    "expected_errors",
    "expected_user_mean_widths",
    "finish_batch",
    "finish_releases",
    "mechanisms",
    "plan",
    "plan_joint",
    "plan_mean",
    "plan_variance",
    "quote_epsilon",
    "release",
    "release_joint",
    "release_mean",
    "release_variance",
    "start_many",
    "start_releases",
    "start_user_mean_releases",
    "validate_options",
    "worst_case_optimal_d",
]
