"""Datasets: the synthetic credit world (`credit`), scikit-learn's digits (`digits`), and the
audit's base set with the lecture canary (`canaries`), and a synthetic ratings world for the
recommender (`ratings`)."""

__all__ = ("canaries", "credit", "digits", "ratings")
