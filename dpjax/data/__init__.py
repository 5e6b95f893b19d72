"""Datasets: the synthetic credit world (`credit`) and scikit-learn's digits (`digits`)."""
