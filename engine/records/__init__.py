"""Training-record formats (hcpe, hcpe3, .data): their dtypes and writers."""
