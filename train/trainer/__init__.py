"""The trainer: a run's settings, its data loaders, optimizer steps, losses, metrics and plots, DDP ranks."""
