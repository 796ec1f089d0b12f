"""Experiment tracking of campaigns: step and evaluation metrics into MLflow and W&B through their official clients."""
