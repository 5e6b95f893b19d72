"""The smallest noise that meets a privacy target: one geometric bisection for every caller.

`smallest_noise(eps_of_sigma, target, lo, hi)`, eps non-increasing in sigma, works in
log(sigma): optional bracketing (factor > 1) widens hi, then lo, within `limits`; then
bisects mid = sqrt(lo hi) until hi / lo - 1 <= rtol. The upper end is returned, so it
always meets the target.

Examples:
  >>> round(smallest_noise(lambda s: 1.0 / s, 0.5, 1.0, 4.0, rtol=1e-9), 6)
  2.0
  >>> round(smallest_noise(lambda s: 10.0 / s, 2.0, 0.1, 1.0, factor=2.0), 3)
  5.0
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from dpjax import _validate

MAX_BRACKET_STEPS = 400
MAX_BISECTION_STEPS = 200


def smallest_noise(eps_of_sigma: Callable[[float], float], target_epsilon: float, lo: float,
                   hi: float, *, rtol: float = 1e-4, factor: Optional[float] = None,
                   limits: tuple[float, float] = (0.0, math.inf)) -> float:
  """Smallest sigma (to rtol relative, the upper end of the bracket) with eps <= target.

  Without `factor` the bracket must hold the answer, eps(lo) > target >= eps(hi). Raises
  ValueError on bad input or when no sigma within `limits` (or MAX_BRACKET_STEPS) works.
  """
  _validate.check_callable(eps_of_sigma, "eps_of_sigma")
  target = _validate.check_epsilon(target_epsilon, "target_epsilon")
  lo = _validate.check_positive(lo, "lo")
  hi = _validate.check_positive(hi, "hi")
  if not lo < hi:
    raise ValueError(f"lo must be < hi, got lo = {lo:g}, hi = {hi:g}")
  rtol = _validate.check_probability(rtol, "rtol", open_low=True, open_high=True)
  low, high = (_validate.check_nonnegative(limits[0], "limits[0]"),
               _validate.check_range(limits[1], "limits[1]", 0.0, open_low=True, allow_inf=True))
  if factor is not None:
    factor = _validate.check_range(factor, "factor", 1.0, open_low=True)
    for _ in range(MAX_BRACKET_STEPS):
      if eps_of_sigma(hi) <= target:
        break
      lo, hi = hi, hi * factor
      if hi > high or math.isinf(hi):
        raise ValueError(f"target_epsilon={target} is not reached at noise multiplier "
                         f"{lo:g}, and the next bracket end {hi:g} is beyond the limit "
                         f"{high:g}")
    else:
      raise ValueError(f"target_epsilon={target} is not reached by any noise multiplier "
                       f"<= {lo:g} ({MAX_BRACKET_STEPS} widenings)")
    for _ in range(MAX_BRACKET_STEPS):
      if eps_of_sigma(lo) > target:
        break
      lo, hi = lo / factor, lo
      if lo < low:
        raise ValueError(f"target_epsilon={target} is already met at noise multiplier "
                         f"{hi:g}, at the lower end {low:g} of the range")
    else:
      raise ValueError(f"target_epsilon={target} is already met at noise multiplier "
                       f"{hi:g} ({MAX_BRACKET_STEPS} narrowings)")
  for _ in range(MAX_BISECTION_STEPS):
    if not hi / lo - 1.0 > rtol:
      break
    mid = math.sqrt(lo * hi)
    if not lo < mid < hi:
      break
    if eps_of_sigma(mid) <= target:
      hi = mid
    else:
      lo = mid
  return float(hi)
