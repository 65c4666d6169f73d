"""Training records: reading and detecting them, the hcpe3 cache, CSA parsing, conversion, the dataset."""
