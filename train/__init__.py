"""Learning, by concern: data/ (records, conversion, the dataset), trainer/, teachers/ (corpora), loop/."""
