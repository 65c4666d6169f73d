"""Training-record formats (hcpe, hcpe3, .data): dtypes, the hcp check, hcpe3 game reading, writers."""
