r"""scikit-learn estimators over dpjax's private fits: ``dpjax.sklearn``.

``LogisticRegression``, ``LinearRegression``, ``GaussianMixture`` (DP-EM) and ``IVRegression``
(two-stage DP gradient descent) are scikit-learn estimators -- every setting is a constructor
parameter, ``fit`` / ``predict`` / ``score`` (``predict_proba`` where it applies), fitted
attributes ending in ``_`` -- thin over the library's ``fit_*`` functions, whose ledger each
fit keeps as ``ledger_``. ``sklearn.base.clone``, ``get_params`` / ``set_params`` and
``sklearn.pipeline.Pipeline`` work; a clone shares the original's ``accountant`` (one budget
per data set: a copy would let clones spend it twice).

The data bounds are public inputs, named as diffprivlib names them (``data_norm`` for the l2
bound of a row of ``X``; ``bounds_X``, ``bounds_y`` for boxes): never read from the data, and a
missing one is an error naming it. Records outside them are clipped onto them.

scikit-learn is an extra (``pip install "dpjax[sklearn]"``), imported only by this package.
See the docs page "From scikit-learn".
"""

from __future__ import annotations

_HINT = ('dpjax.sklearn needs scikit-learn >= 1.6: pip install "dpjax[sklearn]" '
         '(or "dpjax[experiments]")')

try:
    import sklearn as _sklearn
except ImportError as err:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(_HINT) from err

if tuple(int(p) for p in _sklearn.__version__.split(".")[:2] if p.isdigit()) < (1, 6):
    raise ImportError(f"{_HINT}; found scikit-learn {_sklearn.__version__}")

from dpjax.sklearn.iv import IVRegression  # noqa: E402
from dpjax.sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from dpjax.sklearn.mixture import GaussianMixture  # noqa: E402

__all__ = ["GaussianMixture", "IVRegression", "LinearRegression", "LogisticRegression"]
