"""Tests for private hyperparameter tuning: the repeat-and-select RDP bound and dpjax.tuning.

The bound is checked against dp_accounting's RepeatAndSelectDpEvent, against the
paper's pure-DP and Gaussian corollaries, and against the exact Renyi divergence of
a small discrete repeat-and-select mechanism (computed from the law of K's
probability generating function), which it must never undercut.
"""

import logging
import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
from scipy import special

from dpjax import accounting
from dpjax.accounting import rdp

logging.getLogger("absl").setLevel(logging.ERROR)

# Integer orders: there both our subsampled-Gaussian curve and dp_accounting's are
# exact, so the comparison isolates the repeat-and-select transform.
_INT_ORDERS = np.arange(2.0, 129.0)
_SHAPES = (0.0, 0.5, 1.0, 3.0, math.inf)


def _envelope(x):
  return np.minimum.accumulate(np.asarray(x)[::-1])[::-1]


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.01, 1000), (2.5, 0.1, 50)])
@pytest.mark.parametrize("mean", [3.0, 40.0])
@pytest.mark.parametrize("shape", _SHAPES)
def test_matches_dp_accounting(sigma, q, steps, mean, shape):
  acct = dp_rdp.RdpAccountant(orders=list(_INT_ORDERS))
  acct.compose(dp_event.RepeatAndSelectDpEvent(
      dp_event.SelfComposedDpEvent(
          dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps),
      mean, shape))
  base = steps * rdp.subsampled_gaussian_rdp(q, sigma, _INT_ORDERS)
  ours = rdp.repeat_and_select_rdp(_INT_ORDERS, base, mean_runs=mean, shape=shape)
  # dp_accounting applies the monotone envelope for the truncated laws only; ours
  # always does (valid: Renyi divergence is nondecreasing in the order).
  np.testing.assert_allclose(ours, _envelope(acct._rdp), rtol=1e-6)  # pylint: disable=protected-access
  eps_ref = acct.get_epsilon(1e-5)
  eps = accounting.tuned_dpsgd_epsilon(sigma, q, steps, 1e-5, mean_runs=mean, shape=shape,
                                       orders=_INT_ORDERS)
  assert eps == pytest.approx(eps_ref, rel=1e-6)


def _log_gamma(mean, eta):
  return rdp.truncated_negative_binomial_log_gamma(mean, eta)


@pytest.mark.parametrize("eta", [0.0, 0.3, 1.0, 2.0, 7.5])
@pytest.mark.parametrize("mean", [1.5, 10.0, 300.0])
def test_gamma_gives_the_mean(eta, mean):
  """E[K] = sum_k k P[K = k] from the pmf of Definition 1 equals mean_runs."""
  gamma = math.exp(_log_gamma(mean, eta))
  k = np.arange(1, 100_000, dtype=np.float64)   # tail mass below e^-40 here
  if eta == 0.0:
    logp = k * math.log1p(-gamma) - np.log(k) - math.log(-math.log(gamma))
  else:
    logp = (k * math.log1p(-gamma) + special.gammaln(k + eta) - special.gammaln(eta)
            - special.gammaln(k + 1) - math.log(math.expm1(-eta * math.log(gamma))))
  p = np.exp(logp)
  assert p.sum() == pytest.approx(1.0, rel=1e-9)
  assert (k * p).sum() == pytest.approx(mean, rel=1e-9)
  # Conservative side: the returned gamma's mean is >= mean_runs.
  assert rdp._tnb_mean_from_log_gamma(math.log(gamma), eta) >= mean * (1 - 1e-12)  # pylint: disable=protected-access


@pytest.mark.parametrize("eta", [0.0, 0.5, 1.0, 2.0])
@pytest.mark.parametrize("mean", [2.0, 20.0, 1000.0])
@pytest.mark.parametrize("eps", [0.1, 1.0])
def test_pure_dp_corollary(eta, mean, eps):
  """Q eps-DP (RDP eps at every order) -> A (2 + eta) eps-DP (Papernot & Steinke, Cor. of Thm 2).

  With orders up to 1e12 the bound at the largest order equals the closed form
  eps + (1 + eta) min_l[(1 - 1/l) eps + log(1/gamma)/l] + log(mean)/(l_max - 1),
  whose limit is (2 + eta) eps; it may be below it (the min over l picks a small l
  when log(1/gamma) < eps) but never above it by more than the vanishing terms.
  """
  orders = np.geomspace(1.001, 1e12, 400)
  out = rdp.repeat_and_select_rdp(orders, np.full_like(orders, eps), mean_runs=mean, shape=eta)
  log_inv_gamma = -_log_gamma(mean, eta)
  slack = (1 + eta) * log_inv_gamma / orders[-1] + math.log(mean) / (orders[-1] - 1)
  assert out[-1] <= (2 + eta) * eps + slack + 1e-12
  assert out[-1] >= eps
  if log_inv_gamma >= eps:     # then the min is at the largest order: the limit is attained
    assert out[-1] == pytest.approx((2 + eta) * eps, rel=1e-9, abs=slack + 1e-12)
  # Liu & Talwar (2019): geometric K, pure eps-DP base -> 3 eps-DP.
  if eta == 1.0:
    assert out[-1] <= 3 * eps + slack + 1e-12


@pytest.mark.parametrize("eta", [0.0, 1.0, 2.5])
@pytest.mark.parametrize("mean", [5.0, 100.0])
@pytest.mark.parametrize("sigma", [2.0, 6.0])
def test_gaussian_corollary(eta, mean, sigma):
  """Q with RDP rho l (Gaussian, rho = 1/(2 sigma^2)): paper's closed form.

  eps'(l) = rho l + (1 + eta)(2 sqrt(rho log(1/gamma)) - rho) + log(mean)/(l - 1),
  valid when lhat* = sqrt(log(1/gamma)/rho) >= 1. On a dense grid of orders our
  value (the envelope over l of the grid min over lhat) is above the envelope of
  the closed form by a constant, between 0 and the grid's discretisation error.
  """
  rho = 1.0 / (2.0 * sigma ** 2)
  log_inv_gamma = -_log_gamma(mean, eta)
  assert math.sqrt(log_inv_gamma / rho) >= 1.0
  orders = np.geomspace(1.0001, 2000.0, 20_000)
  out = rdp.repeat_and_select_rdp(orders, rho * orders, mean_runs=mean, shape=eta)
  closed = (rho * orders + (1 + eta) * (2 * math.sqrt(rho * log_inv_gamma) - rho)
            + math.log(mean) / (orders - 1))
  gap = out - _envelope(closed)
  assert np.all(gap >= -1e-12)
  assert np.ptp(gap) < 1e-9              # one constant (the envelope commutes with + c)
  assert gap.max() < 1e-6 * (1 + eta) * 2 * math.sqrt(rho * log_inv_gamma) + 1e-9


def _pgf(x, mean, shape):
  """E[x^K] for the law of K (K = 0 only for Poisson)."""
  if math.isinf(shape):
    return math.exp(mean * (x - 1.0))
  lg = _log_gamma(mean, shape)
  if shape == 0.0:
    return math.log1p(-(1 - math.exp(lg)) * x) / lg
  return (math.expm1(-shape * math.log1p(-(1 - math.exp(lg)) * x))
          / math.expm1(-shape * lg))


def _best_of_k_dist(probs, mean, shape):
  """Law of the best of K iid draws from `probs` over outcomes 0 < 1 < ... (higher is better).

  P[best <= j] = E[F(j)^K] = pgf(F(j)); with the Poisson law the extra outcome
  'nothing' (K = 0) has probability pgf(0).
  """
  cdf = np.cumsum(probs)
  cdf[-1] = 1.0
  at_most = np.array([_pgf(c, mean, shape) for c in cdf])
  nothing = _pgf(0.0, mean, shape)
  dist = np.diff(np.concatenate([[nothing], at_most]))
  return np.concatenate([[nothing], dist]) if nothing > 0 else dist


def _renyi(p, r, alpha):
  """D_alpha(p || r) of two laws with full support, in log space."""
  return special.logsumexp(alpha * np.log(p) + (1 - alpha) * np.log(r)) / (alpha - 1)


@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("mean", [1.5, 8.0])
def test_never_below_exact_divergence(shape, mean):
  """Brute force: Q = 4-ary randomized response (eps = 1); A releases the best of K outputs.

  The exact Renyi divergence of A's output laws, in both directions, over every
  pair of neighbouring inputs (true value 0 vs 3, 1 vs 2, ...), must not exceed
  the bound built from Q's exact RDP curve.
  """
  eps, k = 1.0, 4
  orders = np.concatenate([np.linspace(1.05, 10, 60), np.geomspace(10.5, 500, 40)])
  base = rdp.randomized_response_rdp(eps, orders, num_buckets=k)
  bound = rdp.repeat_and_select_rdp(orders, base, mean_runs=mean, shape=shape)
  hi, lo = math.exp(eps) / (math.exp(eps) + k - 1), 1.0 / (math.exp(eps) + k - 1)
  laws = [_best_of_k_dist(np.where(np.arange(k) == t, hi, lo), mean, shape) for t in range(k)]
  worst = np.zeros_like(orders)
  for s in range(k):
    for t in range(k):
      if s != t:
        worst = np.maximum(worst, [_renyi(laws[s], laws[t], a) for a in orders])
  assert np.all(worst <= bound * (1 + 1e-9))
  assert worst.max() > 0.1   # the check is not vacuous


def test_mean_one_truncated_is_the_base_mechanism():
  orders = np.array([2.0, 3.0, 8.0, 32.0])
  base = rdp.gaussian_rdp(3.0, orders)
  for eta in (0.0, 0.5, 1.0, 4.0):
    np.testing.assert_array_equal(
        rdp.repeat_and_select_rdp(orders, base, mean_runs=1.0, shape=eta), base)
  pois = rdp.repeat_and_select_rdp(orders, base, mean_runs=1.0, shape="poisson")
  assert np.all(pois > base)  # K ~ Poisson(1) is random: a real cost


def test_more_runs_cost_more():
  orders = _INT_ORDERS
  base = 500 * rdp.subsampled_gaussian_rdp(0.02, 1.2, orders)
  for shape in _SHAPES:
    eps = [rdp.rdp_to_epsilon(orders, rdp.repeat_and_select_rdp(
        orders, base, mean_runs=m, shape=shape), 1e-5)[0] for m in (1.0, 3.0, 10.0, 100.0)]
    assert np.all(np.diff(eps) > 0), (shape, eps)
    assert eps[0] >= rdp.rdp_to_epsilon(orders, base, 1e-5)[0]


def test_score_noise_adds_its_rdp():
  orders = _INT_ORDERS
  base = 300 * rdp.subsampled_gaussian_rdp(0.05, 1.0, orders) + rdp.gaussian_rdp(4.0, orders)
  want = rdp.rdp_to_epsilon(orders, rdp.repeat_and_select_rdp(
      orders, base, mean_runs=5, shape=0.0), 1e-6)[0]
  got = accounting.tuned_dpsgd_epsilon(1.0, 0.05, 300, 1e-6, mean_runs=5, shape=0.0,
                                       score_noise_multiplier=4.0, orders=orders)
  assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("kwargs,name", [
    (dict(mean_runs=-3.0, shape=1.0), "mean_runs"),
    (dict(mean_runs=0.5, shape="poisson"), "mean_runs"),
    (dict(mean_runs=float("nan"), shape=1.0), "mean_runs"),
    (dict(mean_runs=5.0, shape=-0.5), "shape"),
    (dict(mean_runs=5.0, shape="geometric"), "shape"),
    (dict(mean_runs=5.0, shape=None), "shape"),
])
def test_bad_inputs_name_the_parameter(kwargs, name):
  orders = np.array([2.0, 4.0])
  with pytest.raises((ValueError, TypeError), match=name):
    rdp.repeat_and_select_rdp(orders, [0.1, 0.2], **kwargs)
  with pytest.raises((ValueError, TypeError), match=name):
    accounting.tuned_dpsgd_epsilon(1.0, 0.01, 100, 1e-5, **kwargs)


def test_pld_is_refused_with_a_reason():
  with pytest.raises(ValueError, match="accountant.*Renyi"):
    accounting.tuned_dpsgd_epsilon(1.0, 0.01, 100, 1e-5, mean_runs=5, shape=1,
                                   accountant="pld")
  with pytest.raises(ValueError, match="rdp_values"):
    rdp.repeat_and_select_rdp([2.0, 4.0], [0.1], mean_runs=5, shape=1)


# ----------------------------------------------------------------------------
# dpjax.tuning

from dpjax import tuning  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.mark.parametrize("mean,shape", [(5.0, 0.0), (5.0, 1.0), (3.0, 0.5), (2.0, "poisson"),
                                        (1.0, 2.0)])
def test_sample_num_runs_law(mean, shape):
  """Monte Carlo (40,000 draws): mean and P[K = k], k <= 8, within 5 standard errors."""
  n = 40_000
  draws = tuning.sample_num_runs(jax.random.key(7), mean, shape, size=n)
  k = np.arange(0, 4000)
  p = np.exp(tuning.num_runs_log_pmf(k, mean, shape))
  assert p.sum() == pytest.approx(1.0, abs=1e-9)
  assert (k * p).sum() == pytest.approx(mean, rel=1e-9)
  sd = math.sqrt(max((k * k * p).sum() - mean ** 2, 0.0))
  assert abs(draws.mean() - mean) <= 5 * sd / math.sqrt(n) + 1e-12
  for j in range(9):
    freq = np.mean(draws == j)
    assert abs(freq - p[j]) <= 5 * math.sqrt(p[j] * (1 - p[j]) / n) + 1e-12, (j, freq, p[j])
  if not isinstance(shape, str):
    assert draws.min() >= 1


@pytest.mark.parametrize("mean,shape", [(10.0, 1.0), (3.0, 0.0), (2.0, "poisson")])
def test_num_runs_quantile_inverts_the_cdf(mean, shape):
  """K = q(u) is the smallest k with CDF(k) > u: CDF(K - 1) <= u < CDF(K)."""
  u = np.random.default_rng(3).random(500)
  k = tuning.num_runs_quantile(u, mean, shape)
  start = 0 if isinstance(shape, str) else 1
  cdf = np.cumsum(np.exp(tuning.num_runs_log_pmf(np.arange(start, 2000), mean, shape)))
  below = np.where(k > start, cdf[np.maximum(k - 1 - start, 0)], 0.0)
  assert np.all(below <= u) and np.all(u < cdf[k - start])
  assert isinstance(tuning.num_runs_quantile(0.5, mean, shape), int)


def test_number_of_runs_law_closed_forms():
  """The pmf sums to 1 with mean E[K] for the logarithmic, geometric and a general shape;
  the geometric law is (1 - 1/mu)^(k-1) / mu; the mean of 400 draws is within 4 SE."""
  k = np.arange(1, 4097)
  for mu, eta in ((10.0, 0.0), (10.0, 1.0), (5.0, 2.5)):
    p = np.exp(tuning.num_runs_log_pmf(k, mu, eta))
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert (k * p).sum() == pytest.approx(mu, abs=1e-6)
  np.testing.assert_allclose(np.exp(tuning.num_runs_log_pmf(k[:50], 10.0, 1.0)),
                             0.9 ** np.arange(50) / 10.0, rtol=1e-12)
  draws = tuning.sample_num_runs(jax.random.key(0), 5.0, 2.5, size=400)
  p = np.exp(tuning.num_runs_log_pmf(k, 5.0, 2.5))
  sd = math.sqrt((k * k * p).sum() - 25.0)
  assert abs(np.mean(draws) - 5.0) < 4 * sd / math.sqrt(400)
  assert tuning.sample_num_runs(jax.random.key(1), 1.0, 1.0) == 1


def test_repeat_and_select_law_of_the_release():
  """Public scores = candidate index; the released candidate is the max of K uniform draws.

  P[released <= j] = E[((j + 1)/C)^K] = pgf((j + 1)/C); with Poisson K = 0 gives -1.
  Monte Carlo over 150 tunings per law, 5 standard errors.
  """
  c, n = 4, 150

  def q_fn(keys, cand):
    assert keys.shape[0] == cand.shape[0]
    return {"cand": np.asarray(cand)}, cand * 1.0

  for mean, shape in ((2.0, 1.0), (1.5, "poisson")):
    sh = math.inf if shape == "poisson" else shape
    res = [tuning.repeat_and_select(jax.random.fold_in(jax.random.key(3), i), q_fn, c,
                                    mean_runs=mean, shape=shape) for i in range(n)]
    got = np.array([r.candidate for r in res])
    for r in res:
      if r.candidate >= 0:
        assert int(r.output["cand"]) == r.candidate and r.score == r.candidate
      else:
        assert r.output is None and math.isnan(r.score)
    for j in range(-1, c):
      want = _pgf((j + 1) / c, mean, sh) if j >= 0 else _pgf(0.0, mean, sh)
      freq = np.mean(got <= j)
      assert abs(freq - want) <= 5 * math.sqrt(want * (1 - want) / n) + 1e-9, (shape, j)


def test_repeat_and_select_rejects_bad_scores_and_inputs():
  q_fn = lambda keys, cand: (jnp.zeros((cand.size,)), jnp.full((cand.size,), jnp.nan))
  with pytest.raises(ValueError, match="scores"):
    tuning.repeat_and_select(jax.random.key(0), q_fn, 3, mean_runs=2, shape=1)
  with pytest.raises(ValueError, match="mean_runs"):
    tuning.repeat_and_select(jax.random.key(0), q_fn, 3, mean_runs=-1, shape=1)
  with pytest.raises(ValueError, match="shape"):
    tuning.sample_num_runs(jax.random.key(0), 3.0, -1.0)
  with pytest.raises(ValueError, match="candidate_probs"):
    tuning.repeat_and_select(jax.random.key(0), q_fn, 3, mean_runs=2, shape=1,
                             candidate_probs=[0.5, 0.6, 0.1])


def test_noisy_count_scores():
  """Integer outputs, mean the count, std s (Monte Carlo, 20,000 draws, 5 standard errors)."""
  s, n = 3.0, 20_000
  out = tuning.noisy_count_scores(jax.random.key(2), np.full(n, 50), s)
  assert np.all(out == np.round(out))
  assert abs(out.mean() - 50) <= 5 * s / math.sqrt(n)
  assert out.var() == pytest.approx(s * s + 1 / 12, rel=5 * math.sqrt(2 / n))
  with pytest.raises(ValueError, match="counts_R"):
    tuning.noisy_count_scores(jax.random.key(2), [1.5], s)


def test_exponential_selection():
  """Frequencies of 250 selections match softmax(eps u) within 5 standard errors."""
  u, eps, n = np.array([10, 11, 13, 12]), 0.7, 250
  p = np.exp(eps * u - special.logsumexp(eps * u))
  got = np.array([tuning.select_by_exponential_mechanism(k, u, eps)
                  for k in jax.random.split(jax.random.key(5), n)])
  for j in range(u.size):
    assert abs(np.mean(got == j) - p[j]) <= 5 * math.sqrt(p[j] * (1 - p[j]) / n)
  e = tuning.exponential_selection_epsilon(3.0, 0.02, 100, 20, 1e-5, 0.5)
  composed = 20 * 100 * rdp.subsampled_gaussian_rdp(0.02, 3.0, rdp.DEFAULT_ORDERS)
  assert e == pytest.approx(max(0.5, rdp.rdp_to_epsilon(rdp.DEFAULT_ORDERS, composed, 1e-5)[0]),
                            rel=1e-12)
  assert tuning.exponential_selection_epsilon(3.0, 0.02, 100, 20, 1e-5, 50.0) == 50.0


def test_user_accuracy_utility_is_the_mean_share_and_moves_by_at_most_one_per_user():
  """Equals a loop over users of (correct records) / (records); removing any one user (all of
  their records) moves every model's utility by at most 1, all in one direction."""
  rng = np.random.default_rng(3)
  user = rng.integers(0, 6, 40)
  correct = rng.random((3, 40)) < 0.6
  got = tuning.user_accuracy_utility(correct, user, 7)     # user 6 holds no record: adds 0
  loop = [sum(correct[m, user == u].mean() for u in np.unique(user)) for m in range(3)]
  np.testing.assert_allclose(got, loop, rtol=1e-12)
  for u in np.unique(user):
    rest = user != u
    moved = got - tuning.user_accuracy_utility(correct[:, rest], user[rest], 7)
    assert np.all((moved >= -1e-12) & (moved <= 1 + 1e-12))
  with pytest.raises(ValueError, match="user_N"):
    tuning.user_accuracy_utility(correct, user, 5)


@pytest.mark.slow
def test_dpsgd_runs_equals_train_many_per_setting():
  from dpjax import dpsgd, models  # pylint: disable=g-import-not-at-top
  x = jax.random.normal(jax.random.key(0), (16, 3))
  y = (x[:, 0] > 0).astype(jnp.int32)
  cfgs = [dpsgd.DpSgdConfig(dataset_size=16, sampling_prob=0.5, num_steps=3, noise_multiplier=1.0,
                            l2_clip_norm=c, learning_rate=lr) for c, lr in ((0.5, 1.0), (2.0, 0.1))]
  model = models.logistic_regression(3)
  keys = jax.random.split(jax.random.key(1), 3)
  out = tuning.dpsgd_runs(keys, [1, 0, 1], x, y, cfgs, model)
  ref1 = dpsgd.train_many(keys[np.array([0, 2])], x, y, jnp.ones((2, 16), bool), cfgs[1], model,
                          perf=dpsgd.PerformanceFlags(progress=False))
  ref0 = dpsgd.train_many(keys[np.array([1])], x, y, jnp.ones((1, 16), bool), cfgs[0], model,
                          perf=dpsgd.PerformanceFlags(progress=False))
  np.testing.assert_array_equal(out.params["w"][np.array([0, 2])], ref1.params["w"])
  np.testing.assert_array_equal(out.params["w"][1], ref0.params["w"][0])
  assert not np.allclose(out.params["w"][0], out.params["w"][2])   # independent runs
  padded = tuning.dpsgd_runs(keys, [1, 0, 1], x, y, cfgs, model, pad_to=4)
  # Another batch size is another compiled program: equal up to float reassociation.
  np.testing.assert_allclose(padded.params["w"], out.params["w"], rtol=1e-6, atol=1e-7)
  bad = cfgs + [dpsgd.DpSgdConfig(dataset_size=16, sampling_prob=0.5, num_steps=3,
                                  noise_multiplier=2.0)]
  with pytest.raises(ValueError, match="privacy curve"):
    tuning.dpsgd_runs(keys, [0, 1, 2], x, y, bad, model)
  with pytest.raises(ValueError, match="candidates_R"):
    tuning.dpsgd_runs(keys, [0, 1, 5], x, y, cfgs, model)


def test_selection_rdp_closed_forms_and_the_order_of_the_procedures():
  """Each curve is its definition from the primitives; the exponential mechanism's curve lies
  between the larger and the sum of its two parts' eps; charging every training costs the
  eps of C T steps (dpjax.accounting, RDP); repeat-and-select's noisy score composes in
  parallel, so it costs at most `accounting.tuned_dpsgd_epsilon`'s sequential composition."""
  from dpjax.accounting import composition  # pylint: disable=g-import-not-at-top
  o, sigma, q, steps, c, d = rdp.DEFAULT_ORDERS, 2.0, 0.1, 50, 6, 1e-5
  kw = dict(sampling_prob=q, num_steps=steps, num_candidates=c, selection_epsilon=0.5,
            score_noise_multiplier=4.0, mean_runs=5.0, shape=1.0)
  other = 0.3 * o / 10
  got = tuning.selection_rdp(o, sigma, other_rdp=other, **kw)
  run = steps * rdp.subsampled_gaussian_rdp(q, sigma, o)
  np.testing.assert_array_equal(got["run"], run)
  np.testing.assert_array_equal(got["selection"],
                                composition.pure_dp_rdp(0.5, o, bounded_range=True))
  assert np.all(got["selection"] <= np.minimum(0.5, o * 0.5 ** 2 / 8) + 1e-15)  # eps-DP, BR
  one = np.maximum(run, o / (2 * 4.0 ** 2))
  want = {"naive_claimed": other + got["selection"] + run, "all_trainings": other + c * run,
          "exponential": other + np.maximum(c * run, got["selection"]),
          "exponential_validation": other + got["selection"],
          "repeat_and_select": other + rdp.repeat_and_select_rdp(o, one, mean_runs=5.0,
                                                                 shape=1.0),
          "repeat_and_select_one_run": other + one}
  for k, v in want.items():
    np.testing.assert_array_equal(got[k], v, err_msg=k)
  eps = lambda curve: rdp.rdp_to_epsilon(o, curve, d)[0]
  alone = tuning.selection_rdp(o, sigma, **kw)           # other_rdp = 0
  assert eps(alone["all_trainings"]) == pytest.approx(
      accounting.dpsgd_epsilon(sigma, q, c * steps, d), rel=1e-9)
  e_em = eps(alone["exponential"])
  assert max(eps(alone["all_trainings"]), eps(alone["selection"])) <= e_em + 1e-12
  assert e_em < eps(alone["all_trainings"] + alone["selection"])
  tuned = accounting.tuned_dpsgd_epsilon(sigma, q, steps, d, mean_runs=5.0, shape=1.0,
                                         score_noise_multiplier=4.0)
  assert eps(alone["repeat_and_select_one_run"]) < eps(alone["repeat_and_select"]) <= tuned
  for bad, name in ((dict(other_rdp=np.zeros(3)), "other_rdp"),
                    (dict(other_rdp=-1.0), "other_rdp"),
                    (dict(score_noise_multiplier=0.0), "score_noise_multiplier")):
    with pytest.raises(ValueError, match=name):
      tuning.selection_rdp(o, sigma, **{**kw, **bad})


def test_select_by_noisy_score_law():
  """P[run 1 of scores (0, d)] = Phi(d / (s sqrt 2)) within 5 standard errors (2,000 keys);
  one key's pick is the argmax of the scores plus s times its float32 normals."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  d, s, n = 1.0, 2.0, 2000
  keys = jax.random.split(jax.random.key(7), n)
  got = np.array([tuning.select_by_noisy_score(k, [0.0, d], s) for k in keys])
  p = stats.norm.cdf(d / (s * math.sqrt(2)))
  assert abs(got.mean() - p) <= 5 * math.sqrt(p * (1 - p) / n)
  sc = np.array([0.3, 2.0, 1.1])
  z = np.asarray(jax.random.normal(keys[0], (3,)), np.float64)
  assert tuning.select_by_noisy_score(keys[0], sc, 0.7) == int(np.argmax(sc + 0.7 * z))
  with pytest.raises(ValueError, match="scores_R"):
    tuning.select_by_noisy_score(keys[0], [], 1.0)


def test_proxy_grids_are_the_aggregators_on_the_proxy_with_their_accounting():
  """gnmax_grid: cell i is `pate.gnmax` from fold_in(key, i), first Q labels kept.
  confident_gnmax_grid: setting a's `pate.confident_gnmax` from fold_in(key, a), cut at each
  Q; its data-independent eps is Q (GNMax + threshold) RDP (closed forms of dpjax.pate)."""
  from dpjax import pate  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  votes = np.stack([rng.integers(0, 21, 12), np.zeros(12, int)], axis=1)
  votes[:, 1] = 20 - votes[:, 0]
  key, orders = jax.random.key(3), np.array([2.0, 4.0, 8.0, 16.0, 32.0])
  lab, ans = tuning.gnmax_grid(key, votes, [(2.0, 5), (0.5, 12)])
  for i, (s, q) in enumerate(((2.0, 5), (0.5, 12))):
    want = np.asarray(pate.gnmax(jax.random.fold_in(key, i), votes, s))
    np.testing.assert_array_equal(lab[i], np.where(np.arange(12) < q, want, 0))
    np.testing.assert_array_equal(ans[i], np.arange(12) < q)
  settings = [dict(threshold=14.0, sigma_threshold=3.0, sigma=2.0),
              dict(threshold=10.0, sigma_threshold=5.0, sigma=4.0)]
  lab, ans, dep, ind = tuning.confident_gnmax_grid(key, votes, settings, [4, 12], delta=1e-5,
                                                   orders=orders)
  assert lab.shape == ans.shape == (4, 12) and len(dep) == len(ind) == 4
  for a, st in enumerate(settings):
    l_a, a_a = map(np.asarray, pate.confident_gnmax(jax.random.fold_in(key, a), votes, **st))
    for j, q in enumerate((4, 12)):
      i, first = 2 * a + j, np.arange(12) < q
      np.testing.assert_array_equal(lab[i], np.where(first, l_a, 0))
      np.testing.assert_array_equal(ans[i], a_a & first)
      closed = q * (pate.gnmax_rdp_data_independent(st["sigma"], orders)
                    + pate.threshold_rdp_data_independent(st["sigma_threshold"], orders))
      assert ind[i] == pytest.approx(pate.epsilon(orders, closed, 1e-5), rel=1e-12)
      assert dep[i] <= ind[i] + 1e-12
  with pytest.raises(ValueError, match="queries"):
    tuning.confident_gnmax_grid(key, votes, settings, [13], delta=1e-5, orders=orders)
  with pytest.raises(ValueError, match="cells"):
    tuning.gnmax_grid(key, votes, [(0.0, 3)])


def test_proxy_release_plans_on_the_proxy_and_bounds_its_data_dependent_eps():
  """The plan is `pate_release.plan_release`'s; the releasable eps is the release's and, as
  the release bounds the true total except with probability 0.01, at least the data-dependent
  eps of every query; no possible plan gives (None, inf)."""
  from unittest import mock  # pylint: disable=g-import-not-at-top
  from dpjax import pate_release  # pylint: disable=g-import-not-at-top
  from dpjax.pate import labelling  # pylint: disable=g-import-not-at-top
  votes = np.array([[45, 5]] * 10 + [[30, 20]] * 10)
  kw = dict(delta=1e-5, sigma=20.0, threshold=40.0, sigma_threshold=10.0)
  plan, eps = tuning.proxy_release(jax.random.key(1), votes, **kw)
  assert plan == pate_release.plan_release(votes, None, **kw)
  assert tuning.proxy_release(None, votes, **kw) == (plan, None)
  assert eps == pate_release.release(jax.random.key(1), votes, None, params=plan, **kw).epsilon
  dep_all = labelling.labelling_epsilons(None, votes, np.ones(20, bool), orders=rdp.DEFAULT_ORDERS,
                                         **kw)["epsilon_data_dependent_all"]
  assert dep_all <= eps < math.inf
  with mock.patch.object(pate_release, "plan_release", side_effect=ValueError("orders: C5")):
    assert tuning.proxy_release(jax.random.key(1), votes, **kw) == (None, math.inf)
