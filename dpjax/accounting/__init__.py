"""Privacy accounting: composition, RDP, PLD and GDP.

The front door (dpsgd_epsilon, calibrate_noise, Accountant) is added by the
accounting work; submodules are importable directly.
"""
