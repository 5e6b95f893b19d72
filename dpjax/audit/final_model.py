"""Final-model (hidden-state) audits of DP-SGD on real networks.

The adversary sees only the last iterate theta_T and the public theta_0 (canaries and scores:
`dpjax.audit.crafting`; the heuristic compared with: `dpjax.audit.last_iterate`). `audit` trains
R runs from one theta_0 and scores the final models and, on the same runs, the gradient canaries
white-box. `paper_protocol_audit` is Annamalai & De Cristofaro's protocol beside our bounds.
Every bound is a `runner.TrainingAudit` at the given confidence.

References: Annamalai & De Cristofaro 2024 (arXiv:2405.14106); Cebere, Bellet & Papernot 2025
(arXiv:2405.14457); Steinke et al. 2025 (arXiv:2410.06186).
Shape letters: R runs (models), K canaries, T steps, N records, F features, S seeds.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate, models, tradeoff
from dpjax.accounting import gdp
from dpjax.audit import crafting, last_iterate, parametric, stats

# The audit.


class FinalModelAdversary(NamedTuple):
  """One canary and the final-model scores an adversary computes for it.

  scores: {name: fn(theta_T, theta_0) -> float[K]} (higher = IN, jax-traceable), one test each.
  Exactly one of record (x_c [F...], y_c; K = 1) and gradient_canaries (pytree like params, leaves
  [K, ...]; clipped and sampled by the engine; scored white-box too when of norm C and orthogonal).
  """
  name: str
  scores: dict
  record: Optional[tuple] = None
  gradient_canaries: Any = None


@dataclasses.dataclass(frozen=True)
class FinalModelAudit:
  """What `audit` measured: {"adversary/score": TrainingAudit}, white_box {name: TrainingAudit},
  the RDP (claimed), PLD (exact) and last-iterate eps of the config, and the R final models.
  """
  audits: dict
  white_box: dict
  claimed_epsilon: float
  exact_epsilon: float
  last_iterate_epsilon: float
  config: Any
  params: Any = None


def _check_adversaries(adversaries, x_shape, params):
  if not isinstance(adversaries, (list, tuple)) or not adversaries:
    raise TypeError("adversaries must be a non-empty list of FinalModelAdversary")
  names = set()
  p_struct = jax.tree.structure(params)
  for a in adversaries:
    if not isinstance(a, FinalModelAdversary):
      raise TypeError(f"adversaries must hold FinalModelAdversary, got {type(a).__name__}")
    if a.name in names:
      raise ValueError(f"two adversaries named {a.name!r}")
    names.add(a.name)
    if not isinstance(a.scores, dict) or not a.scores:
      raise ValueError(f"adversary {a.name!r}: scores must be a non-empty dict")
    for s, fn in a.scores.items():
      _validate.check_callable(fn, f"adversaries[{a.name!r}].scores[{s!r}]")
    if (a.record is None) == (a.gradient_canaries is None):
      raise ValueError(f"adversary {a.name!r}: give exactly one of record and "
                       "gradient_canaries")
    if a.record is not None:
      if not (isinstance(a.record, tuple) and len(a.record) == 2):
        raise TypeError(f"adversary {a.name!r}: record must be a pair (x_c, y_c)")
      _validate.check_array(a.record[0], f"adversaries[{a.name!r}].record[0]", np.float32,
                            shape=x_shape[1:])
    else:
      if jax.tree.structure(a.gradient_canaries) != p_struct:
        raise ValueError(f"adversary {a.name!r}: gradient_canaries must have the "
                         "structure of the parameters")
      for l, p in zip(jax.tree.leaves(a.gradient_canaries), jax.tree.leaves(params)):
        if tuple(np.shape(l))[1:] != tuple(np.shape(p)) or np.shape(l)[0] < 1:
          raise ValueError(f"adversary {a.name!r}: gradient_canaries leaves must be "
                           "[K, *param.shape]")
        _validate.check_array(np.asarray(l), f"adversaries[{a.name!r}].gradient_canaries",
                              np.float32)


def _num_k(a) -> int:
  return 1 if a.record is not None else int(np.shape(jax.tree.leaves(a.gradient_canaries)[0])[0])


def audit(key, cfg, model, x_NxF, y_N, *, init_params, adversaries, num_runs: int,
          confidence: float = 0.95, white_box: bool = True, progress: bool = True,
          **train_kwargs) -> FinalModelAudit:
  """Final-model audit of DP-SGD from a fixed, public theta_0 (through `run.train`).

  Every run trains on all N records plus every adversary's canaries, each adversary with its own
  balanced bits; scores see only (theta_T, theta_0). A gradient adversary's K trials are pooled
  (valid when its canaries' scores are independent given the bits; else give K = 1). White-box
  (norm-C orthogonal gradient canaries): each update projected on g_j / C, times B / C, scored by
  `canary.white_box_llr` with the same coins. num_runs R >= 4; **train_kwargs: other
  `dpsgd.train_many` components, audited against the claim. Raises ValueError on diverged runs.
  """
  from dpjax import accounting, dpsgd  # pylint: disable=g-import-not-at-top
  from dpjax import models as models_lib  # pylint: disable=g-import-not-at-top
  from dpjax.audit import canary, run, runner  # pylint: disable=g-import-not-at-top

  key = _validate.check_key(key)
  _validate.check_instance(cfg, dpsgd.DpSgdConfig, "cfg")
  models_lib.check_model(model)
  # Per run: masks, bits, scores and a model's parameters are held (as canary_design).
  r = _validate.check_size(num_runs, "num_runs", minimum=4, bytes_per_unit=64)
  confidence = _validate.check_confidence(confidence)
  x = jnp.asarray(_validate.check_array(x_NxF, "x_NxF", np.float32, min_size=1))
  if x.ndim < 2:
    raise ValueError(f"x_NxF must have rank >= 2, got shape {x.shape}")
  y = jnp.asarray(_validate.check_labels(y_N, "y_N", model.num_outputs, shape=(x.shape[0],)))
  models.check_params(model, init_params, "init_params")
  _check_adversaries(adversaries, x.shape, init_params)
  sigma = float(cfg.noise_multiplier)
  if not sigma > 0:
    raise ValueError("audit needs a noisy configuration (noise_multiplier > 0)")
  q, t, delta, c = (float(cfg.sampling_prob), int(cfg.num_steps), float(cfg.delta),
                    float(cfg.l2_clip_norm))
  claimed = float(cfg.epsilon())
  exact = float(accounting.dpsgd_epsilon(sigma, q, t, delta, accountant="pld"))
  heuristic = last_iterate.last_iterate_epsilon(q, sigma, t, delta)

  k_bits, k_train, k_seed = jax.random.split(key, 3)
  bit_keys = jax.random.split(k_bits, len(adversaries))
  bits = {a.name: runner.inclusion_bits(bk, r, _num_k(a)) for a, bk in zip(adversaries, bit_keys)}
  recs = [a for a in adversaries if a.record is not None]
  grads = [a for a in adversaries if a.record is None]
  records = gradients = None
  if recs:
    records = (np.stack([np.asarray(a.record[0], np.float32) for a in recs]),
               np.concatenate([_validate.check_labels(np.asarray(a.record[1]).reshape(1),
                                                      f"adversaries[{a.name!r}].record[1]",
                                                      model.num_outputs) for a in recs]),
               np.concatenate([bits[a.name] for a in recs], axis=1))
  gslices, observe, kk = {}, None, 0
  if grads:
    for a in grads:
      gslices[a.name] = slice(kk, kk + _num_k(a))
      kk += _num_k(a)
    g_all = jax.tree.map(lambda *ls: jnp.concatenate([jnp.asarray(l, jnp.float32) for l in ls], 0),
                         *[a.gradient_canaries for a in grads])
    gradients = (g_all, np.concatenate([bits[a.name] for a in grads], axis=1))
    if white_box:
      observe = _observer(jax.tree.map(lambda l: l / c, g_all))
  kwargs = dict(train_kwargs)
  kwargs.setdefault("perf", dpsgd.PerformanceFlags(progress=progress))
  out = run.train(k_train, run.canary_design(x, y, r, records=records, gradients=gradients),
                  cfg, model, observe_fn=observe, init_params=init_params, components=kwargs)
  seeds = [runner.seed_from_key(s) for s in jax.random.split(k_seed, 2 * len(adversaries))]

  def trial(s, a, i):
    return runner.TrainingAudit.of(s, bits[a.name], delta=delta, confidence=confidence,
                                   mode="independent", claimed_epsilon=claimed, seed=seeds[2 * i])

  audits, wb = {}, {}
  for i, a in enumerate(adversaries):
    for sname, fn in a.scores.items():
      s = np.asarray(jax.jit(jax.vmap(fn, in_axes=(0, None)))(out.params, init_params),
                     np.float64).reshape(r, -1)
      if s.shape != bits[a.name].shape:
        raise ValueError(f"adversary {a.name!r} score {sname!r} returned {s.shape[1]} "
                         f"scores per run, expected {bits[a.name].shape[1]}")
      if np.isnan(s).any():
        raise ValueError(f"adversary {a.name!r} score {sname!r} is NaN on some run")
      audits[f"{a.name}/{sname}"] = trial(s, a, i)
    if a.name in gslices and observe is not None and _orthogonal_norm_c(a.gradient_canaries, c):
      wb[a.name] = trial(canary.white_box_llr(
          np.asarray(out.observations)[:, :, gslices[a.name]],
          expected_batch_size=cfg.expected_batch_size, l2_clip_norm=c, sampling_prob=q,
          noise_multiplier=sigma), a, i)
  return FinalModelAudit(audits, wb, claimed, exact, heuristic, cfg, out.params)


def standard_adversaries(model, theta0, x_priv_NxF, y_priv_N, unused_F, target_feature,
                         l2_clip_norm: float) -> list[FinalModelAdversary]:
  """Three adversaries of one theta_0: "input canary" (-loss), "gradient canary" (displacement;
  input-weight canaries for an MLP target, else a quiet coordinate) and "target" (the one-hot record
  of `target_feature` with its least-logit label, or the input canary; -loss and projection).
  """
  c = _validate.check_positive(l2_clip_norm, "l2_clip_norm")
  unused = np.asarray(unused_F)
  xi, yi = crafting.input_canary(model, theta0, exclude_features=unused)
  if target_feature is not None:           # an MLP's one-feature target
    g = crafting.input_weight_canaries(model, theta0, unused[unused != target_feature], c,
                                       skip_units=(0,))
    xt = np.zeros((np.shape(x_priv_NxF)[1],), np.float32)
    xt[target_feature] = 1.0
    yt = int(np.argmin(np.asarray(model.apply(theta0, xt[None]))[0]))
  else:
    g = crafting.quiet_coordinate_canary(model, theta0, x_priv_NxF, y_priv_N, c)
    xt, yt = xi, yi
  d = crafting.gradient_direction(model, theta0, xt, yt)
  return [
      FinalModelAdversary("input canary", {"loss": crafting.loss_score(model, xi, yi)},
                          record=(xi, yi)),
      FinalModelAdversary("gradient canary", {"final model": crafting.projection_score(g)},
                          gradient_canaries=g),
      FinalModelAdversary("target", {"loss": crafting.loss_score(model, xt, yt),
                                     "projection": crafting.projection_score(d)},
                          record=(xt, yt))]


_OBSERVERS: dict = {}


def _observer(unit_dirs):
  """observe_fn projecting an update on K unit directions (float[K]); one object per set of
  directions (keyed by bytes) so `dpsgd.train_many` reuses its compiled program.
  """
  import hashlib  # pylint: disable=g-import-not-at-top
  leaves = [np.asarray(l, np.float32) for l in jax.tree.leaves(unit_dirs)]
  h = hashlib.sha256(str(jax.tree.structure(unit_dirs)).encode())
  for l in leaves:
    h.update(str(l.shape).encode())
    h.update(l.tobytes())
  fp = h.hexdigest()
  if fp not in _OBSERVERS:
    if len(_OBSERVERS) >= 32:
      _OBSERVERS.clear()
    dirs = jax.tree.map(jnp.asarray, unit_dirs)

    def observe(update):
      return crafting.projections(dirs, update)
    _OBSERVERS[fp] = observe
  return _OBSERVERS[fp]


def _orthogonal_norm_c(g, c: float) -> bool:
  """Whether the K canaries have norm C and pairwise orthogonal directions."""
  flat = np.concatenate([np.asarray(l, np.float64).reshape(np.shape(l)[0], -1)
                         for l in jax.tree.leaves(g)], axis=1)
  gram = flat @ flat.T
  return bool(np.allclose(gram, c * c * np.eye(flat.shape[0]), rtol=1e-5, atol=1e-6 * c * c))


# Annamalai & De Cristofaro's protocol.


def blank_target(record_shape, label: int = 9) -> tuple[np.ndarray, int]:
  """Annamalai & De Cristofaro's target: the all-zero record float32[*record_shape], label 9.

  Examples:
    >>> x, y = blank_target((64,))
    >>> x.shape, float(abs(x).max()), y
    ((64,), 0.0, 9)
  """
  shape = _validate.check_sizes(record_shape, "record_shape")
  _validate.check_size(int(np.prod(shape)), "record_shape")
  return np.zeros(shape, np.float32), _validate.check_int(label, "label", minimum=0)


def gdp_epsilon_all_thresholds(scores_in_K, scores_out_K, delta: float,
                               confidence: float = 0.95) -> parametric.GdpEstimate:
  """Annamalai & De Cristofaro's estimate: mu-GDP at the best threshold of the same scores.

  Over t in {-inf} and every score, with one-sided Clopper-Pearson upper limits at `confidence`
  (in (0.5, 1)), mu = max_t Phi^-1(1 - FPR_u(t)) - Phi^-1(FNR_u(t)); eps = eps(delta) of mu-GDP.

  Warning: NOT a valid lower bound: the threshold is chosen on the evaluated scores with no union
  bound, the limits are not joint, and mu-GDP is assumed. Valid alternatives on the same scores:
  `parametric.gdp_estimate` and `score_audit.score_bounds`.
  References: Annamalai & De Cristofaro 2024; Nasr et al. 2023.

  Examples:
    >>> g = gdp_epsilon_all_thresholds(np.ones(100), np.zeros(100), 1e-5)
    >>> round(g.mu, 2), g.threshold                  # perfect separation, 100 + 100
    (3.78, 0.0)
  """
  delta = _validate.check_delta(delta)
  confidence = _validate.check_range(confidence, "confidence", 0.5, 1.0, open_low=True,
                                     open_high=True)
  s_in = stats.check_scores(scores_in_K, "scores_in_K")
  s_out = stats.check_scores(scores_out_K, "scores_out_K")
  cand = np.r_[-np.inf, np.unique(np.r_[s_in, s_out])]
  fp, fn = stats.error_counts(s_in, s_out, cand)
  two_sided = 2.0 * confidence - 1.0            # each limit of the interval is one-sided
  _, fpr_u = stats.clopper_pearson(fp, s_out.size, two_sided)
  _, fnr_u = stats.clopper_pearson(fn, s_in.size, two_sided)
  mu_t = np.atleast_1d(tradeoff.gaussian_mu(fpr_u, fnr_u))
  j = int(np.argmax(mu_t))
  mu = float(mu_t[j])
  eps = gdp.gaussian_epsilon(delta, mu) if mu > 0 else 0.0
  return parametric.GdpEstimate(
      mu, float(eps), float(cand[j]), delta, confidence,
      "NOT a valid bound: threshold chosen on the evaluated scores (max over all "
      "thresholds, no union bound), one-sided Clopper-Pearson limits at the confidence "
      "each (not joint); valid only if mu-GDP (Annamalai & De Cristofaro 2024)")


@dataclasses.dataclass(frozen=True)
class PaperProtocolAudit:
  """What `paper_protocol_audit` measured over S seeds on the same scores: `paper` (S GdpEstimate),
  `strict` ("best" of `score_bounds`, float64[S]), `gdp_held_out` ("gdp", float64[S]),
  `pooled_strict` ("best" on all seeds' trials) and the S TrainingAudits.
  """
  paper: list
  strict: np.ndarray
  gdp_held_out: np.ndarray
  pooled_strict: float
  audits: list
  claimed_epsilon: float
  exact_epsilon: float
  config: Any

  def to_json(self) -> dict:
    """Plain numbers: per-seed lists, means, sample sd (0 for one seed) and "paper_ceiling"
    (their estimate at perfect separation).
    """
    sd = lambda v: float(np.std(v, ddof=1)) if len(v) > 1 else 0.0
    paper = np.array([g.epsilon for g in self.paper])
    n_in, n_out = int(self.audits[0].included_RxK.sum()), int((~self.audits[0].included_RxK).sum())
    return {"noise_multiplier": float(self.config.noise_multiplier),
            "claimed_epsilon": self.claimed_epsilon, "exact_epsilon": self.exact_epsilon,
            "trials_per_seed": [n_in, n_out], "paper_epsilon": paper.tolist(),
            "paper_mu": [g.mu for g in self.paper], "paper_mean": float(paper.mean()),
            "paper_sd": sd(paper), "strict_epsilon": self.strict.tolist(),
            "strict_mean": float(self.strict.mean()), "strict_sd": sd(self.strict),
            "strict_pooled": self.pooled_strict,
            "gdp_held_out_epsilon": self.gdp_held_out.tolist(),
            "gdp_held_out_mean": float(self.gdp_held_out.mean()),
            "paper_ceiling": gdp_epsilon_all_thresholds(
                np.ones(n_in), np.zeros(n_out), float(self.config.delta),
                self.paper[0].confidence).epsilon}


def paper_protocol_audit(key, cfg, model, x_NxF, y_N, *, init_params, target=None,
                         num_seeds: int = 5, num_runs: int = 200,
                         confidence: float = 0.95, progress: bool = False
                         ) -> PaperProtocolAudit:
  """Annamalai & De Cristofaro's black-box audit of full-batch DP-SGD (q = 1), S times.

  Seed s (key fold_in(key, s)): `audit` trains R runs from `init_params`, R/2 with the target
  (default `blank_target`), scores -loss; both their estimate and `score_bounds` are reported.
  Their update theta - eta (sum clip(g_i) + N(0, sigma^2 C^2 I)) is ours with eta =
  cfg.learning_rate / cfg.dataset_size (the noisy sum is divided by the public B = n).
  """
  from dpjax import dpsgd  # pylint: disable=g-import-not-at-top
  from dpjax.audit import score_audit  # pylint: disable=g-import-not-at-top
  key = _validate.check_key(key)
  _validate.check_instance(cfg, dpsgd.DpSgdConfig, "cfg")
  if float(cfg.sampling_prob) != 1.0:
    raise ValueError("paper_protocol_audit audits full-batch DP-SGD: cfg.sampling_prob "
                     f"must be 1, got {cfg.sampling_prob}")
  x = _validate.check_array(x_NxF, "x_NxF", np.float32, min_size=1)
  if x.ndim < 2:
    raise ValueError(f"x_NxF must have rank >= 2, got shape {x.shape}")
  # Per run: masks, bits, scores and a model's parameters are held (as canary_design).
  r = _validate.check_size(num_runs, "num_runs", minimum=4, bytes_per_unit=64)
  # S audits of 2 R scores each are kept: refused before the first if they cannot fit.
  s = _validate.check_size(num_seeds, "num_seeds", bytes_per_unit=16, units=r,
                           units_name="num_runs")
  confidence = _validate.check_range(confidence, "confidence", 0.5, 1.0, open_low=True,
                                     open_high=True)
  _validate.check_bool(progress, "progress")
  if target is None:
    target = blank_target(x.shape[1:])
  if not (isinstance(target, tuple) and len(target) == 2):
    raise TypeError("target must be a pair (x_c, y_c)")
  adv = [FinalModelAdversary("target", {"loss": crafting.loss_score(model, *target)},
                             record=target)]
  delta = float(cfg.delta)
  audits, paper = [], []
  for i in range(s):
    a = audit(jax.random.fold_in(key, i), cfg, model, x, y_N, init_params=init_params,
              adversaries=adv, num_runs=num_runs, confidence=confidence, white_box=False,
              progress=progress)
    t = a.audits["target/loss"]
    audits.append(t)
    paper.append(gdp_epsilon_all_thresholds(t.scores_in, t.scores_out, delta, confidence))
  pooled = score_audit.score_bounds(np.concatenate([t.scores_in for t in audits]),
                                    np.concatenate([t.scores_out for t in audits]),
                                    delta=delta, confidence=confidence)["best"].epsilon_lower
  return PaperProtocolAudit(paper, np.array([t.epsilon_lower()["best"] for t in audits]),
                            np.array([t.epsilon_lower()["gdp"] for t in audits]), float(pooled),
                            audits, a.claimed_epsilon, a.exact_epsilon, cfg)
