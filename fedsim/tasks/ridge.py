r"""Ridge regression with a server dataset: FedLRGD's exact-rank case.

    f(x, y; theta) = (1/2)(x^T theta - y)^2 + (mu/2) ||theta||^2,
    g_i(x, y; theta) = x_i (x^T theta - y) + mu theta_i,

so for every coordinate i, theta -> g_i(x, y; theta) lies in the (p+1)-dimensional
span of {theta_1, ..., theta_p, 1}: the "matrix" g_i(x; theta) (rows data,
columns parameters) has rank at most p + 1 (specs/fedlrgd.md §2.2, "Exact
low-rank case"). With r = p + 1 generic server samples and anchors, FedLRGD's
interpolated gradient equals the true one and its iterates equal exact GD's
(§7 item 2); with r > p + 1 every G^(i) is exactly singular.

Same data layout, data generation and F_* as :mod:`fedsim.tasks.logistic_soft`
(F_* here is closed form). Responses y = theta_gt^T x + label_noise N(0,1) are
not confined to [0,1]; this task is a numerical test case, not App. A's model.
L1 = p + mu (||x||^2 <= p).
"""

from __future__ import annotations

from fedsim.core.types import Task
from fedsim.tasks.logistic_soft import make_smooth_erm_task


def make_ridge_task(**kwargs) -> Task:
  """``make_smooth_erm_task("ridge", ...)``; see that function for the arguments."""
  kwargs.setdefault("label_noise", 0.1)
  return make_smooth_erm_task("ridge", **kwargs)
