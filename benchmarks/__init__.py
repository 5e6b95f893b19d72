"""Speed and accuracy against baselines, each ratio measured within one process."""
