"""The peers' accountant test cases, evaluated by dpjax and by dp_accounting, row by row.

    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.peer_cases     # writes results/peer_cases.json
    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.peer_cases --only opacus --json /tmp/x.json

`CASES` holds the parameters of every test case of the peers' own accountant test suites
(Opacus, TensorFlow Privacy, dp_accounting, prv_accountant; `SOURCES` pins the commits read)
that dpjax and dp_accounting 0.6.0 can both evaluate: the mechanism and its noise, sampling,
steps, the neighbouring relation, and what is asked (eps at delta, delta at eps, the RDP
curve at given orders, or the smallest noise meeting a target). Each names its source file
and test. `NOT_SHARED` names the cases left out and why (one of the two libraries cannot
compute them, or the test asks for no accountant value).

A row evaluates dpjax's event accountant (`event_accounting`; calibration rows the front door
`accounting.calibrate_noise`) and dp_accounting's `RdpAccountant` / `PLDAccountant` (default
orders / grid h = 1e-4 unless the test sets them) in one process, best of `--repeats` timed
calls, and marks "<=" when ours is at most theirs * (1 + 1e-12) (calibration rows: at most
theirs * (1 + 1e-6), both bisections run to 1e-7). DP-SGD rows also give the front door
`accounting.dpsgd_epsilon(..., "pld")` (the adaptive grid). Where ours is above, the row says
whether dp_accounting's answer is certified below the true value: exactly for compositions of
unsampled Gaussians (mu-GDP at 50 digits), and for DP-SGD by a lower bound on delta from
`pld_pmfs._dominated_discretise`.

Event specs are nested tuples: ("gaussian", sigma), ("laplace", b), ("rr", p, k) (dp_accounting's
noise parameter p: a uniform bucket with probability p), ("dlaplace", a, sensitivity),
("zcdp", rho), ("poisson", q, inner), ("truncated", n, q, max_batch, sigma),
("self", inner, count), ("compose", (inner, ...)), ("repeat", inner, mean_runs, shape),
("mog", sigma, sensitivities, probs), ("tree", sigma, step_counts). NOISE stands for the free
noise parameter of a calibration row.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from absl import app, flags

from benchmarks import report


def _define_flags() -> None:
  """The command line's flags, defined only when run as a program (other benchmarks that
  tests import in the same process define --json and --repeats too)."""
  flags.DEFINE_string("json", None, "Where to write the rows (default: "
                      "benchmarks/results/peer_cases.json).")
  flags.DEFINE_string("only", None, "Only cases whose name contains this text.")
  flags.DEFINE_integer("repeats", 3, "Timed calls per side for rows faster than 0.2 s (the "
                       "best is kept); slower rows are timed once.")
  flags.DEFINE_bool("certify", True, "Try to certify rows where ours is above.")


SOURCES = {
    "opacus": ("pytorch/opacus", "4d0ebc84613d214fbfd37fbfd1390e3747a625ce"),
    "tf_privacy": ("tensorflow/privacy", "03035d5d4a271ac795dab80f5bc1cef82fc3d462"),
    "dp_accounting": ("google/differential-privacy",
                      "b5b0286e313b64a692abfc8c528d54ef47d960a0"),
    "prv_accountant": ("microsoft/prv_accountant", "a844f7200af2722d6a81e0386b2b7351688ecf35"),
}
NOISE = "NOISE"
ADD_REMOVE, REPLACE_ONE, REPLACE_SPECIAL = "add_remove", "replace_one", "replace_special"
QUERIES = ("epsilon", "delta", "rdp", "noise")
SLACK = 1e-12            # "<=": ours <= theirs * (1 + SLACK)
CALIBRATION_TOL = 1e-7   # both bisections, relative (ours) / absolute on sigma ~ 1 (theirs)
CALIBRATION_SLACK = 1e-6


@dataclasses.dataclass(frozen=True)
class PeerCase:
  """One peer test case: `event` (a spec) under `relation`, by `accountant` ("rdp" / "pld"),
  asked `query` at `value` (delta for "epsilon", eps for "delta", (target eps, delta) for
  "noise", unused for "rdp"); `orders` the test's RDP orders (None: each library's default);
  `peer_accountant` what the peer's test ran, where it differs."""
  name: str
  source: str
  path: str
  test: str
  event: tuple
  relation: str
  accountant: str
  query: str
  value: object = None
  orders: Optional[tuple] = None
  peer_accountant: Optional[str] = None


def _dpsgd(sigma, q, steps):
  return ("self", ("poisson", q, ("gaussian", sigma)), steps)


def _tnb_mean(gamma: float, shape: float) -> float:
  """E[K] of the truncated negative binomial with parameters (gamma, shape)."""
  if shape == 0:
    return (1 - 1 / gamma) / math.log(gamma)
  return shape * (1 / gamma - 1) / (1 - gamma ** shape)


def _opacus() -> list[PeerCase]:
  src, acc = "opacus", "opacus/tests/accountants_test.py"
  cls = "AccountingTest."
  out = [
      PeerCase("opacus rdp q=0.04 s=1.5 T=2250", src, acc, cls + "test_rdp_accountant",
               _dpsgd(1.5, 0.04, 2250), ADD_REMOVE, "rdp", "epsilon", 1e-5),
      PeerCase("opacus gdp q=0.04 s=1.5 T=2249", src, acc, cls + "test_gdp_accountant",
               _dpsgd(1.5, 0.04, 2249), ADD_REMOVE, "pld", "epsilon", 1e-5,
               peer_accountant="gdp (CLT)"),
      PeerCase("opacus prv q=0.04 s=1.5 T=2249", src, acc, cls + "test_prv_accountant",
               _dpsgd(1.5, 0.04, 2249), ADD_REMOVE, "pld", "epsilon", 1e-5,
               peer_accountant="prv"),
  ]
  for test, t, acct, peer in (("rdp_epochs", 2250, "rdp", None), ("rdp_steps", 2000, "rdp", None),
                              ("prv_epochs", 2250, "pld", "prv"), ("prv_steps", 2000, "pld", "prv"),
                              ("gdp", 2250, "pld", "gdp (CLT)")):
    out.append(PeerCase(f"opacus calibrate {test} eps=8 q=0.04 T={t}", src, acc,
                        cls + f"test_get_noise_multiplier_{test}", _dpsgd(NOISE, 0.04, t),
                        ADD_REMOVE, acct, "noise", (8.0, 1e-5), peer_accountant=peer))
  # opacus/tests/prv_accountant.py: msr_values (sigma, q, steps) at delta 1e-6, the entries
  # not commented out
  for s, q, t in ((0.8, 0.001, 100), (1.5, 0.001, 100), (2.0, 0.001, 100), (3.0, 0.001, 100),
                  (0.8, 0.05, 100), (1.5, 0.05, 100), (2.0, 0.05, 100), (3.0, 0.05, 100),
                  (0.8, 0.2, 100), (1.5, 0.2, 100), (2.0, 0.2, 100), (3.0, 0.2, 100),
                  (0.8, 0.001, 1000), (1.5, 0.001, 1000), (2.0, 0.001, 1000),
                  (3.0, 0.001, 1000), (0.8, 0.05, 1000), (1.5, 0.05, 1000), (2.0, 0.05, 1000),
                  (3.0, 0.05, 1000), (0.8, 0.001, 20000), (1.5, 0.001, 20000),
                  (2.0, 0.001, 20000), (3.0, 0.001, 20000), (1.5, 0.05, 20000),
                  (2.0, 0.05, 20000), (3.0, 0.05, 20000), (0.8, 0.001, 50000),
                  (1.5, 0.001, 50000), (2.0, 0.001, 50000), (3.0, 0.001, 50000),
                  (1.5, 0.05, 50000), (2.0, 0.05, 50000), (3.0, 0.05, 50000)):
    out.append(PeerCase(f"opacus prv s={s} q={q} T={t}", src, "opacus/tests/prv_accountant.py",
                        "PRVAccountantTest.test_values", _dpsgd(s, q, t), ADD_REMOVE, "pld",
                        "epsilon", 1e-6, peer_accountant="prv"))
  return out


_TF_DPSGD_ORDERS = ((1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 3.5, 4.0, 4.5)
                    + tuple(float(o) for o in range(5, 64)) + (128.0, 256.0, 512.0))
_TF_TREE_ORDERS = (tuple(1 + x / 10 for x in range(1, 100))
                   + tuple(float(o) for o in range(12, 64)))


def _tf_privacy() -> list[PeerCase]:
  src = "tf_privacy"
  lib = "tensorflow_privacy/privacy/analysis/compute_dp_sgd_privacy_test.py"
  cls = "ComputeDpSgdPrivacyTest."
  out = []
  # test_compute_dp_sgd_privacy: (n, batch, sigma, epochs, delta); q = batch / n,
  # T = ceil(epochs n / batch), the library's own RDP orders
  for test, n, b, s, epochs, d, t in (("Test0", 60000, 150, 1.3, 15, 1e-5, 6000),
                                      ("Test1", 100000, 100, 1.0, 30, 1e-7, 30000),
                                      ("Test2", 100000000, 1024, 0.1, 10, 1e-7, 976563)):
    out.append(PeerCase(f"tfp compute_dp_sgd_privacy {test}", src, lib,
                        cls + f"test_compute_dp_sgd_privacy_{test}", _dpsgd(s, b / n, t),
                        ADD_REMOVE, "rdp", "epsilon", d, orders=_TF_DPSGD_ORDERS))
  # test_compute_dp_sgd_example_privacy: 1.2 epochs, sigma 0.7, delta 1e-5; microbatching
  # halves sigma; no sampling: ceil(1.2) = 2 Gaussians, q = 0.01: ceil(1.2 / 0.01) = 120 steps
  for micro in (False, True):
    for q in (None, 1e-2):
      for acct in ("rdp", "pld"):
        s = 0.35 if micro else 0.7
        event = ("self", ("gaussian", s), 2) if q is None else _dpsgd(s, q, 120)
        tag = (f"{'' if micro else 'no_'}microbatching_"
               f"{'with' if q else 'no'}_subsampling_{acct}")
        out.append(PeerCase(f"tfp example_privacy {tag}", src, lib,
                            cls + f"test_compute_dp_sgd_example_privacy_{tag}", event,
                            ADD_REMOVE, acct, "epsilon", 1e-5))
  # the statement tests: n 10000, batch 64, 5 epochs, sigma 2 with microbatching (1.0),
  # delta 1e-6: once per epoch (5 Gaussians) and Poisson (q = 64 / 10000, ceil(5 / q) = 782)
  for acct, test in (("rdp", "no_user_dp_with_rdp"), ("pld", "no_user_dp_with_pld")):
    out.append(PeerCase(f"tfp statement once-per-epoch {acct}", src, lib,
                        cls + f"test_dp_sgd_privacy_statement_{test}",
                        ("self", ("gaussian", 1.0), 5), ADD_REMOVE, acct, "epsilon", 1e-6))
    out.append(PeerCase(f"tfp statement poisson {acct}", src, lib,
                        cls + f"test_dp_sgd_privacy_statement_{test}",
                        _dpsgd(1.0, 64 / 10000, 782), ADD_REMOVE, acct, "epsilon", 1e-6))
  tree = "tensorflow_privacy/privacy/analysis/tree_aggregation_accountant_test.py"
  tcls = "TreeAggregationTest."
  for test, s in (("eps20", 1.13), ("eps2", 8.83)):
    out.append(PeerCase(f"tfp tree restart s={s} T=1600", src, tree,
                        tcls + f"test_compute_eps_tree_{test}", ("tree", s, (1600,)),
                        REPLACE_SPECIAL, "rdp", "epsilon", 1e-6, orders=_TF_TREE_ORDERS))
  for test, t, s in (("t100n0.1", 100, 0.1), ("t1000n0.01", 1000, 0.01)):
    out.append(PeerCase(f"tfp tree of single steps s={s} T={t}", src, tree,
                        tcls + f"test_no_tree_no_sampling_{test}",
                        ("compose", tuple(("tree", s, (1,)) for _ in range(t))),
                        REPLACE_SPECIAL, "rdp", "rdp", orders=_TF_TREE_ORDERS))
  out.append(PeerCase("tfp gaussian zcdp 0.81 to eps", src, tree,
                      tcls + "test_gaussian_zcdp_to_epsilon",
                      ("gaussian", 1 / math.sqrt(2 * 0.81)), ADD_REMOVE, "rdp", "epsilon",
                      1e-10, orders=_TF_TREE_ORDERS))
  return out


def _dp_accounting_rdp() -> list[PeerCase]:
  src, path = "dp_accounting", "python/dp_accounting/dp_accounting/rdp/rdp_privacy_accountant_test.py"
  cls = "RdpPrivacyAccountantTest."
  a = 2.71828
  out = [
      PeerCase("dpa rdp gaussian x6", src, path, cls + "test_rdp_composition",
               ("self", ("gaussian", 3.14159), 6), ADD_REMOVE, "rdp", "rdp", orders=(a,)),
      PeerCase("dpa rdp gaussian heterogeneous", src, path, cls + "test_rdp_composition",
               ("compose", (("gaussian", 3.14159), ("gaussian", 1.61803))), ADD_REMOVE, "rdp",
               "rdp", orders=(a,)),
      PeerCase("dpa rdp gaussian", src, path, cls + "test_compute_rdp_gaussian",
               ("gaussian", 2.71828), ADD_REMOVE, "rdp", "rdp", orders=(3.14159,)),
      PeerCase("dpa rdp q=1 composed gaussians", src, path, cls + "test_compute_rdp_multi_gaussian",
               ("poisson", 1.0, ("compose", (("gaussian", 2.71828), ("gaussian", 6.28319)))),
               ADD_REMOVE, "rdp", "rdp", orders=(3.14159,)),
      PeerCase("dpa rdp zcdp = gaussian", src, path, cls + "test_zcdp_matches_gaussian",
               ("zcdp", 1 / (2 * 3.14159 ** 2)), ADD_REMOVE, "rdp", "rdp", orders=(a,)),
      PeerCase("dpa rdp poisson gaussian q=0.01 s=2.5 x50", src, path,
               cls + "test_compute_rdp_poisson_sampled_gaussian", _dpsgd(2.5, 0.01, 50),
               ADD_REMOVE, "rdp", "rdp", orders=(1.5, 2.5, 5.0, 50.0, 100.0)),
  ]
  for rel, tag in ((REPLACE_SPECIAL, "replace_special"), (REPLACE_ONE, "replace_one")):
    for name, p, k in (("small_eps", 0.3, 10), ("medium_eps", 0.05, 20), ("large_eps", 0.01, 3)):
      out.append(PeerCase(f"dpa rdp rr {tag} p={p} k={k}", src, path,
                          cls + f"test_compute_rdp_randomized_response_{tag}_{name}",
                          ("rr", p, k), rel, "rdp", "rdp",
                          orders=(1.5, 2.5, 5.0, 50.0, 100.0)))
  for query, value in (("epsilon", 1e-6), ("delta", 1.0)):
    out.append(PeerCase(f"dpa rdp gaussian s=4.530877117 {query}", src, path,
                        cls + "test_compute_epsilon_delta_gaussian", ("gaussian", 4.530877117),
                        ADD_REMOVE, "rdp", query, value,
                        orders=tuple(0.001 * i for i in range(1001, 100000))))
  for test, s in (("eps20", 1.13), ("eps2", 8.83)):
    out.append(PeerCase(f"dpa rdp tree s={s} T=1600", src, path, cls + f"test_compute_eps_tree_{test}",
                        ("tree", s, (1600,)), REPLACE_SPECIAL, "rdp", "epsilon", 1e-6,
                        orders=_TF_TREE_ORDERS))
  for test, t, s in (("t100n0.1", 100, 0.1), ("t1000n0.01", 1000, 0.01)):
    out.append(PeerCase(f"dpa rdp trees of one step s={s} T={t}", src, path,
                        cls + f"test_no_tree_no_sampling_{test}",
                        ("compose", tuple(("tree", s, (1,)) for _ in range(t))),
                        REPLACE_SPECIAL, "rdp", "rdp", orders=_TF_TREE_ORDERS))
  lap_orders = (1 + 1e-6, 1.1 - 1e-6, 1.1 + 1e-6, 1e10)   # the test's, less order 1
  for test, eps, count in (("small_eps", 0.01, 1), ("medium_eps", 1.0, 1), ("large_eps", 100.0, 1),
                           ("repetition", 1.0, 100)):
    ev = ("laplace", 1 / eps) if count == 1 else ("self", ("laplace", 1 / eps), count)
    out.append(PeerCase(f"dpa rdp laplace eps={eps} x{count}", src, path,
                        cls + f"test_laplace_{test}", ev, ADD_REMOVE, "rdp", "epsilon", 1e-10,
                        orders=lap_orders))
  for test, eps, mean, shape in (("logarithmic", 1, 1000, 0), ("geometric", 1, 1000, 1),
                                 ("negative binomial 0.5", 1, 1000, 0.5),
                                 ("negative binomial 2", 1, 100, 2),
                                 ("negative binomial 5", 1, 1000, 5)):
    out.append(PeerCase(f"dpa rdp repeat-select laplace {test}", src, path,
                        cls + f"test_repeat_select_pure_negative_binomial_{test}",
                        ("repeat", ("laplace", 1 / eps), mean, shape), ADD_REMOVE, "rdp",
                        "epsilon", 1e-10, orders=(1e10,)))
  trivial_orders = (1 + 1e-6, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 12.0, 14.0, 16.0,
                    20.0, 24.0, 28.0, 32.0, 48.0, 64.0, 128.0, 256.0, 512.0, 1024.0)
  for test, shape, s in (("shape0", 0, 1), ("shape0.5", 0.5, 10), ("shape1", 1, 0.1),
                         ("shape2", 2, 1)):
    out.append(PeerCase(f"dpa rdp repeat-select trivial {test} s={s}", src, path,
                        cls + f"test_repeat_select_trivial_{test}",
                        ("repeat", ("gaussian", s), 1, shape), ADD_REMOVE, "rdp", "rdp",
                        orders=trivial_orders))
  for test, rho, gamma, shape in (("small0", 0.01, 0.01, 0), ("med0", 1, 0.1, 0),
                                  ("large0", 10, 0.99, 0), ("small0.5", 0.01, 0.01, 0.5),
                                  ("med0.5", 1, 0.1, 0.5), ("large0.5", 10, 0.99, 0.5),
                                  ("small1", 0.01, 0.01, 1), ("med1", 1, 0.1, 1),
                                  ("large1", 10, 0.99, 1), ("small5", 0.01, 0.01, 5),
                                  ("med5", 1, 0.1, 5), ("large5", 10, 0.99, 5)):
    mean = _tnb_mean(gamma, shape)
    rho = min(rho, -math.log(gamma))
    orders = tuple(sorted({1.1, 2.0, math.sqrt(-math.log(gamma) / rho),
                           1 + math.sqrt(math.log(mean) / rho), 3.0, 5.0, 10.0, 100.0, 1000.0,
                           10000.0} - {1.0}))
    out.append(PeerCase(f"dpa rdp repeat-select gaussian {test}", src, path,
                        cls + f"test_repeat_select_gaussian_negative_binomial_{test}",
                        ("repeat", ("gaussian", math.sqrt(0.5 / rho)), mean, shape),
                        ADD_REMOVE, "rdp", "rdp", orders=tuple(o for o in orders if o > 1)))
  for test, eps, mean in (("mean1", 1, 1), ("mean2", 0.1, 2), ("mean10", 10, 10),
                          ("mean100", 0.001, 100), ("mean10^4", 2, 1000), ("mean10^10", 1, 1e10)):
    alpha = 1 + 1 / math.expm1(eps)
    out.append(PeerCase(f"dpa rdp repeat-select laplace poisson {test}", src, path,
                        cls + f"test_repeat_and_select_pure_poisson_{test}",
                        ("repeat", ("laplace", 1 / eps), mean, math.inf), ADD_REMOVE, "rdp",
                        "rdp", orders=(alpha, 1e10, 1e100)))
  for test, s, mean in (("small_small", 0.001, 1), ("small_med", 0.001, 1000),
                        ("small_large", 0.001, 1e9), ("med_small", 1, 1), ("med_med", 1, 1000),
                        ("med_large", 1, 1e9), ("large_small", 1000, 1),
                        ("large_med", 1000, 1000), ("large_large", 1000, 1e9)):
    out.append(PeerCase(f"dpa rdp repeat-select gaussian poisson {test}", src, path,
                        cls + f"test_repeat_and_select_gaussian_poisson_{test}",
                        ("repeat", ("gaussian", s), mean, math.inf), ADD_REMOVE, "rdp", "rdp"))
  return out


def _dp_accounting_pld() -> list[PeerCase]:
  src, path = "dp_accounting", "python/dp_accounting/dp_accounting/pld/pld_privacy_accountant_test.py"
  cls = "PldPrivacyAccountantTest."
  out = []
  for rel, p, k in ((REPLACE_ONE, 4 / (3 + math.e), 4), (REPLACE_SPECIAL, (4 - math.e) / 3, 4),
                    (REPLACE_SPECIAL, math.exp(-1), 2)):
    out.append(PeerCase(f"dpa pld rr {rel} p={p:.4f} k={k}", src, path,
                        cls + "test_randomized_response", ("rr", p, k), rel, "pld", "delta", 1.0))

  def both(name, test, event, eps, delta):
    return [PeerCase(f"dpa pld {name} delta", src, path, cls + test, event, ADD_REMOVE, "pld",
                     "delta", eps),
            PeerCase(f"dpa pld {name} epsilon", src, path, cls + test, event, ADD_REMOVE, "pld",
                     "epsilon", delta)]
  out += both("gaussian sqrt3 x3", "test_gaussian_basic", ("self", ("gaussian", math.sqrt(3)), 3),
              1.0, 0.126936)
  sub = ("poisson", 0.2, ("gaussian", 0.5))
  out += both("poisson gaussian q=0.2 s=0.5 x(1+2)", "test_poisson_subsampled_gaussian",
              ("compose", (sub, ("self", sub, 2))), 1.0, 0.15594)
  out += both("poisson gaussian q=0.2 s=0.5 x3", "test_self_composed_subsampled_gaussian",
              ("self", sub, 3), 1.0, 0.15594)
  out += both("laplace 1x3 + 2x2", "test_laplace_basic",
              ("compose", (("self", ("laplace", 1.0), 3), ("self", ("laplace", 2.0), 2))),
              4.0, 1e-14)
  lap = ("poisson", 0.2, ("laplace", 0.5))
  out += both("poisson laplace q=0.2 b=0.5 x3", "test_poisson_subsampled_laplace",
              ("compose", (lap, ("self", lap, 2))), 2.46964, 1e-14)
  out.append(PeerCase("dpa pld discrete laplace 1x3 + 0.5x2 delta", src, path,
                      cls + "test_discrete_laplace_basic",
                      ("compose", (("self", ("dlaplace", 1.0, 1), 3),
                                   ("self", ("dlaplace", 0.5, 1), 2))),
                      ADD_REMOVE, "pld", "delta", 4.0))
  out += both("mixture of gaussians", "test_mixture_of_gaussians_basic",
              ("compose", (("self", ("mog", 1.0, (0.0, 1.0, 2.0), (0.2, 0.6, 0.2)), 3),
                           ("self", ("mog", 2.0, (0.0, 2.0, 3.0), (0.33, 0.34, 0.33)), 2))),
              17.193115, 1e-6)
  out += both("truncated subsampled gaussian", "test_truncated_subsampled_gaussian_basic",
              ("compose", (("self", ("truncated", 4, 0.5, 2, 1.0), 3),
                           ("self", ("truncated", 3, 0.5, 2, 1.0), 2))),
              17.904330, 1e-6)
  return out


def _prv_accountant() -> list[PeerCase]:
  src, path = "prv_accountant", "tests/test_accountant.py"
  cls = "TestPRVAccountant."
  out = []
  for t in (9_999, 10_000):
    for eps in (0.1, 1.0, 10.0, 100.0):
      out.append(PeerCase(f"prv gaussian s=100 x{t} delta(eps={eps})", src, path,
                          cls + "test_gaussian_mechanism_analytic_homogeneous",
                          ("self", ("gaussian", 100.0), t), ADD_REMOVE, "pld", "delta", eps,
                          peer_accountant="prv"))
  out.append(PeerCase("prv gaussians 10x50 + 5x50 delta(eps=4)", src, path,
                      cls + "test_gaussian_mechanism_analytic_heterogeneous",
                      ("compose", (("self", ("gaussian", 10.0), 50),
                                   ("self", ("gaussian", 5.0), 50))),
                      ADD_REMOVE, "pld", "delta", 4.0, peer_accountant="prv"))
  out.append(PeerCase("prv dpsgd s=0.9 q=256/1e5 T=4900", src, path,
                      cls + "test_invariance_max_compositions", _dpsgd(0.9, 256 / 100000, 4900),
                      ADD_REMOVE, "pld", "epsilon", 1e-5, peer_accountant="prv"))
  lap = "tests/test_privacy_random_variables/test_laplace.py"
  for t in (10_000, 100_000):
    for d in (1e-5, 1e-6):
      out.append(PeerCase(f"prv laplace eps0=0.01 x{t} delta={d}", src, lap,
                          "TestLaplaceMechanism.test_advanced_composition",
                          ("self", ("laplace", 100.0), t), ADD_REMOVE, "pld", "epsilon", d,
                          peer_accountant="prv"))
  out.append(PeerCase("prv readme: dpsgd + gaussian + laplace", src, "tests/test_readme.py",
                      "test_1", ("compose", (_dpsgd(0.8, 5e-3, 100), ("self", ("gaussian", 8.0), 200),
                                             ("self", ("laplace", 10.0), 100))),
                      ADD_REMOVE, "pld", "epsilon", 1e-6, peer_accountant="prv"))
  dpsgd = "tests/test_dpsgd.py"
  for test, q, t, eps, d in (("test_sensible_range", 2e-3, 10_000, 4.0, 1e-7),
                             ("test_robustness", 256 / 50_000, 9765, 10.0, 1e-5),
                             ("test_robustness_2", 0.26058631921824105, 18800, 4.0,
                              0.00011448277499759097)):
    out.append(PeerCase(f"prv calibrate q={q:.4g} T={t} eps={eps}", src, dpsgd,
                        f"TestFindNoiseMultiplier.{test}", _dpsgd(NOISE, q, t), ADD_REMOVE,
                        "pld", "noise", (eps, d), peer_accountant="prv"))
  return out


CASES: tuple = tuple(_opacus() + _tf_privacy() + _dp_accounting_rdp() + _dp_accounting_pld()
                     + _prv_accountant())

# (source, path, test, why it is not a shared row)
NOT_SHARED = (
    ("opacus", "opacus/tests/accountants_test.py", "test_get_noise_multiplier_overshoot",
     "hypothesis-drawn parameters, no fixed case"),
    ("tf_privacy", "tensorflow_privacy/privacy/analysis/compute_dp_sgd_privacy_test.py",
     "user-level tests", "group privacy (Vadhan Lemma 2.2) of an example-level eps: a conversion, "
     "not an event either accountant composes"),
    ("tf_privacy", "tensorflow_privacy/privacy/analysis/compute_noise_from_budget_test.py",
     "test_compute_noise", "skipped in the peer's suite"),
    ("tf_privacy", "tensorflow_privacy/privacy/analysis/tree_aggregation_accountant_test.py",
     "test_compose_tree_rdp, test_compute_eps_tree_decreasing", "RDP at order 1 (dpjax takes "
     "orders > 1) / a monotonicity sweep"),
    ("dp_accounting", "python/dp_accounting/dp_accounting/rdp/rdp_privacy_accountant_test.py",
     "test_compute_rdp_multi_zcdp", "zCDP with xi > 0: dpjax's ZCdpEvent has no xi"),
    ("dp_accounting", "python/dp_accounting/dp_accounting/rdp/rdp_privacy_accountant_test.py",
     "test_compute_rdp_exponential_mechanism, test_permute_and_flip_matches_laplace, "
     "test_discrete_gaussian_*, test_epsilon_delta_dp_event*", "events dp_accounting 0.6.0 "
     "lacks (exponential mechanism, permute-and-flip, discrete Gaussian, (eps, delta))"),
    ("dp_accounting", "python/dp_accounting/dp_accounting/pld/pld_privacy_accountant_test.py",
     "test_epsilon_basic, test_epsilon_delta_basic, test_exponential_mechanism_basic, "
     "test_permute_and_flip_matches_laplace", "events dp_accounting 0.6.0 lacks"),
    ("dp_accounting", "python/dp_accounting/dp_accounting/pld/pld_privacy_accountant_test.py",
     "test_discrete_laplace_basic (epsilon at delta 0)", "dpjax's epsilon takes delta in (0, 1)"),
    ("dp_accounting", "python/dp_accounting/dp_accounting/pld/accountant_test.py",
     "all", "legacy noise / advanced-composition helpers with (eps, delta) inputs"),
    ("dp_accounting", "python/dp_accounting/dp_accounting/pld/privacy_loss_distribution_test.py",
     "all", "pmf-level checks of one discretisation, not accountant answers"),
    ("prv_accountant", "tests/test_privacy_random_variables/test_approximate_dp.py", "all",
     "(eps, delta) events: dp_accounting 0.6.0 lacks them"),
)


# -- building the two libraries' events ---------------------------------------------------

def _rr_epsilon(p: float, k: int) -> float:
  """dpjax's eps of dp_accounting's k-ary randomized response with noise parameter p."""
  return math.log(k / p - k + 1)


def dpjax_event(spec, noise: Optional[float] = None):
  """The dpjax event of `spec` (NOISE replaced by `noise`)."""
  from dpjax.accounting import events as ev  # pylint: disable=import-outside-toplevel
  kind, *a = spec
  v = lambda x: noise if x == NOISE else x
  if kind == "gaussian":
    return ev.GaussianEvent(v(a[0]))
  if kind == "laplace":
    return ev.LaplaceEvent(a[0])
  if kind == "rr":
    return ev.RandomizedResponseEvent(_rr_epsilon(*a), a[1])
  if kind == "dlaplace":
    return ev.DiscreteLaplaceEvent(a[0], a[1])
  if kind == "zcdp":
    return ev.ZCdpEvent(a[0])
  if kind == "poisson":
    return ev.PoissonSampledEvent(a[0], dpjax_event(a[1], noise))
  if kind == "truncated":   # dp_accounting's pairs: the larger dataset has n records
    n, q, b, s = a
    return ev.TruncatedPoissonSampledGaussianEvent(s, q, n, b, neighbours="removal")
  if kind == "self":
    return ev.SelfComposedEvent(dpjax_event(a[0], noise), a[1])
  if kind == "compose":
    return ev.ComposedEvent(tuple(dpjax_event(e, noise) for e in a[0]))
  if kind == "repeat":
    return ev.RepeatAndSelectEvent(dpjax_event(a[0], noise), a[1], a[2])
  if kind == "mog":
    return ev.MixtureOfGaussiansEvent(a[0], tuple(a[1]), tuple(a[2]))
  if kind == "tree":
    return ev.TreeAggregationEvent(a[0], tuple(a[1]))
  raise ValueError(f"unknown event spec {spec!r}")


def dp_accounting_event(spec, noise: Optional[float] = None):
  """The dp_accounting DpEvent of `spec`."""
  import dp_accounting as dpa  # pylint: disable=import-outside-toplevel
  kind, *a = spec
  v = lambda x: noise if x == NOISE else x
  if kind == "gaussian":
    return dpa.GaussianDpEvent(v(a[0]))
  if kind == "laplace":
    return dpa.LaplaceDpEvent(a[0])
  if kind == "rr":
    return dpa.RandomizedResponseDpEvent(a[0], a[1])
  if kind == "dlaplace":
    return dpa.dp_event.DiscreteLaplaceDpEvent(a[0], a[1])
  if kind == "zcdp":
    return dpa.dp_event.ZCDpEvent(a[0])
  if kind == "poisson":
    return dpa.PoissonSampledDpEvent(a[0], dp_accounting_event(a[1], noise))
  if kind == "truncated":
    return dpa.dp_event.TruncatedSubsampledGaussianDpEvent(*a)
  if kind == "self":
    return dpa.SelfComposedDpEvent(dp_accounting_event(a[0], noise), a[1])
  if kind == "compose":
    return dpa.ComposedDpEvent([dp_accounting_event(e, noise) for e in a[0]])
  if kind == "repeat":
    return dpa.dp_event.RepeatAndSelectDpEvent(dp_accounting_event(a[0], noise), a[1], a[2])
  if kind == "mog":
    return dpa.dp_event.MixtureOfGaussiansDpEvent(a[0], list(a[1]), list(a[2]))
  if kind == "tree":
    return dpa.dp_event.SingleEpochTreeAggregationDpEvent(a[0], list(a[1]))
  raise ValueError(f"unknown event spec {spec!r}")


def dpsgd_params(spec) -> Optional[tuple]:
  """(sigma, q, T) when `spec` is T Poisson-sampled Gaussian steps, else None."""
  if (spec[0] == "self" and spec[1][0] == "poisson" and spec[1][2][0] == "gaussian"):
    return spec[1][2][1], spec[1][1], spec[2]
  return None


def gaussian_mu(spec) -> Optional[float]:
  """mu of a composition of unsampled Gaussians (exactly mu-GDP), else None."""
  kind, *a = spec
  if kind == "gaussian":
    return 1.0 / a[0]
  if kind == "self":
    m = gaussian_mu(a[0])
    return None if m is None else m * math.sqrt(a[1])
  if kind == "compose":
    ms = [gaussian_mu(e) for e in a[0]]
    return None if None in ms else math.sqrt(sum(m * m for m in ms))
  return None


# -- evaluating a row ------------------------------------------------------------------------

def _their_accountant(case: PeerCase):
  import dp_accounting as dpa  # pylint: disable=import-outside-toplevel
  rel = {ADD_REMOVE: dpa.NeighboringRelation.ADD_OR_REMOVE_ONE,
         REPLACE_ONE: dpa.NeighboringRelation.REPLACE_ONE,
         REPLACE_SPECIAL: dpa.NeighboringRelation.REPLACE_SPECIAL}[case.relation]
  if case.accountant == "rdp":
    if case.orders is None:
      return dpa.rdp.RdpAccountant(neighboring_relation=rel)
    return dpa.rdp.RdpAccountant(list(case.orders), rel)
  return dpa.pld.PLDAccountant(rel, 1e-4)


def ours_fn(case: PeerCase):
  """A zero-argument function giving dpjax's answer (a float, or the RDP curve)."""
  from dpjax import accounting  # pylint: disable=import-outside-toplevel
  from dpjax.accounting import event_accounting as ea  # pylint: disable=import-outside-toplevel
  if case.query == "noise":
    sigma, q, t = dpsgd_params(case.event)
    del sigma
    target, d = case.value
    return lambda: accounting.calibrate_noise(target, q, t, d, case.accountant,
                                              rtol=CALIBRATION_TOL)
  event = dpjax_event(case.event)
  if case.query == "rdp":
    return lambda: ea.rdp_curve(event, case.orders, case.relation)[1]
  fn = getattr(ea, case.query)
  return lambda: fn(event, case.value, case.accountant, case.relation, orders=case.orders)


def theirs_fn(case: PeerCase):
  """A zero-argument function giving dp_accounting 0.6.0's answer."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  if case.query == "noise":
    from dp_accounting import mechanism_calibration as mc  # pylint: disable=import-outside-toplevel
    target, d = case.value
    return lambda: mc.calibrate_dp_mechanism(
        lambda: _their_accountant(case), lambda s: dp_accounting_event(case.event, s),
        target, d, mc.LowerEndpointAndGuess(0.0, 1.0), tol=CALIBRATION_TOL)
  event = dp_accounting_event(case.event)

  def run():
    acct = _their_accountant(case)
    acct.compose(event)
    if case.query == "rdp":
      orders = np.asarray(acct._orders, float)  # pylint: disable=protected-access
      return orders, np.asarray(acct._rdp, float)  # pylint: disable=protected-access
    return acct.get_epsilon(case.value) if case.query == "epsilon" else acct.get_delta(case.value)
  return run


def _timed(fn, repeats: int):
  t, out = report.best_time(fn, 1)
  if t < 0.2 and repeats > 1:
    t = min(t, report.best_time(fn, repeats - 1)[0])
  return t, out


def _exact_gdp_delta(epsilon: float, mu: float) -> float:
  """delta(eps) of mu-GDP at 50 digits (mpmath), as a float."""
  import mpmath  # pylint: disable=import-outside-toplevel
  with mpmath.workdps(50):
    e, m = mpmath.mpf(epsilon), mpmath.mpf(mu)
    return float(mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2))


def dpsgd_delta_lower_bound(sigma: float, q: float, t: int, epsilon: float, h: float) -> float:
  """A lower bound on delta(eps) of T DP-SGD steps (remove direction): the composed pmf of
  `pld_pmfs._dominated_discretise` less the FFT window's +inf mass, wrap-around and trims, and
  10x its float64 rounding estimate."""
  from dpjax.accounting import pld_grid, pld_pmfs  # pylint: disable=import-outside-toplevel
  tail = 1e-22
  ((pmf, shift),) = pld_pmfs.subsampled_gaussian_pmfs(1.0 / sigma, q, h, 1e-30, ("remove",),
                                                      dominated=True)
  e = epsilon - t * shift
  c = pld_grid.self_compose(pmf, t, tail, tilt_at=e)
  return c.delta(e) - c.infinity_mass - 3 * tail - 10 * c.noise_in_delta(e)


def certify_above(case: PeerCase, theirs: float) -> str:
  """Whether dp_accounting's answer, below ours, is certified below the true value."""
  mu = gaussian_mu(case.event)
  if mu is not None and case.query == "epsilon":
    return ("certified: exact mu-GDP delta at theirs > target"
            if _exact_gdp_delta(theirs, mu) > case.value else "not certified (exact)")
  if mu is not None and case.query == "delta":
    return ("certified: exact mu-GDP delta > theirs"
            if _exact_gdp_delta(case.value, mu) > theirs else "not certified (exact)")
  p = dpsgd_params(case.event)
  if p is not None and case.query == "epsilon" and case.relation == ADD_REMOVE:
    try:
      low = dpsgd_delta_lower_bound(*p, theirs, 1e-3)
    except Exception as err:  # pylint: disable=broad-except
      return f"not certified ({type(err).__name__})"
    return (f"certified: delta lower bound {low:.4g} > target" if low > case.value
            else f"not certified (delta lower bound {low:.4g} <= target)")
  return "not certified (no lower bound for this event)"


def evaluate(case: PeerCase, repeats: int = 1, certify: bool = True) -> dict:
  """One row: ours, theirs, "<=", the relative gap, the times and (DP-SGD) the front door."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from dpjax.accounting import events as ev  # pylint: disable=import-outside-toplevel
  row = {"name": case.name, "source": case.source, "path": case.path, "test": case.test,
         "accountant": case.accountant, "relation": case.relation, "query": case.query,
         "value": case.value}
  try:
    t_ours, ours = _timed(ours_fn(case), repeats)
  except ev.UnsupportedEventError as err:   # a case dpjax cannot account: listed by name
    row["unsupported"] = str(err)
    return row
  t_theirs, theirs = _timed(theirs_fn(case), repeats)
  row.update(ours_s=t_ours, dp_accounting_s=t_theirs, time_ratio=t_theirs / max(t_ours, 1e-9))
  if case.query == "rdp":
    their_orders, their_rdp = theirs
    ours_o = np.asarray(case.orders if case.orders is not None else their_orders, float)
    keep = (ours_o > 1) & np.isfinite(ours_o)
    if case.orders is None:   # their default orders: compare at the ones > 1
      from dpjax.accounting import event_accounting as ea  # pylint: disable=import-outside-toplevel
      ours = ea.rdp_curve(dpjax_event(case.event), ours_o[keep], case.relation)[1]
      their_rdp = their_rdp[keep]
      ours_o = ours_o[keep]
    ratio = np.where(their_rdp > 0, np.asarray(ours) / np.where(their_rdp > 0, their_rdp, 1),
                     np.where(np.asarray(ours) > 0, np.inf, 1.0))
    i = int(np.argmax(ratio))
    row.update(ours=float(ours[i]), dp_accounting=float(their_rdp[i]), order=float(ours_o[i]),
               orders=len(ours_o))
    le = bool(np.all(np.asarray(ours) <= their_rdp * (1 + SLACK)))
  else:
    row.update(ours=float(ours), dp_accounting=float(theirs))
    slack = CALIBRATION_SLACK if case.query == "noise" else SLACK
    le = bool(float(ours) <= float(theirs) * (1 + slack))
  row["le"] = le
  o, t = row["ours"], row["dp_accounting"]
  row["rel_gap"] = (o - t) / abs(t) if t not in (0.0,) and math.isfinite(t) else (
      0.0 if o == t else math.inf)
  p = dpsgd_params(case.event)
  if p is not None and case.query == "epsilon" and case.accountant == "pld":
    from dpjax import accounting  # pylint: disable=import-outside-toplevel
    t_fd, fd = _timed(lambda: accounting.dpsgd_epsilon(*p, case.value, "pld"), repeats)
    row.update(front_door=float(fd), front_door_s=t_fd,
               front_door_le=bool(fd <= t * (1 + SLACK)))
  if not le:
    row["certificate"] = certify_above(case, t) if certify else "not tried"
  return row


def _print(r: dict) -> None:
  if "unsupported" in r:
    print(f"{r['name'][:58]:58s} dpjax cannot compute: {r['unsupported']}", flush=True)
    return
  ok = "<=" if r["le"] else ">"
  extra = f" front door {r['front_door']:.10g}" if "front_door" in r else ""
  print(f"{r['name'][:58]:58s} ours {r['ours']:.10g} {ok} dp_accounting "
        f"{r['dp_accounting']:.10g} (rel {r['rel_gap']:+.2e}) time ratio "
        f"{r['time_ratio']:7.2f}{extra} {r.get('certificate', '')}", flush=True)


def main(argv):
  del argv
  f = flags.FLAGS
  rows = []
  for case in CASES:
    if f.only and f.only not in case.name:
      continue
    rows.append(evaluate(case, f.repeats, f.certify))
    _print(rows[-1])
  shared = [r for r in rows if "unsupported" not in r]
  le = sum(r["le"] for r in shared)
  faster = sum(r["time_ratio"] >= 1 for r in shared)
  print(f"{len(shared)} shared cases ({len(rows) - len(shared)} dpjax cannot compute); ours <= "
        f"dp_accounting in {le}; ours at least as fast in {faster}")
  report.write("peer_cases", {"rows": rows, "not_shared": [list(x) for x in NOT_SHARED],
                              "sources": {k: list(v) for k, v in SOURCES.items()}}, f.json)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
