"""Thin absl entry points: flags -> library calls -> results/<name>/."""
