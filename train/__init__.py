"""Training: record conversion and reading, the dataset, the trainer, the learning loop, corpora."""
