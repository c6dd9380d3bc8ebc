"""The scaling card (contract.card) on the server: export writes an experiment as one; loading reads one back into
rows with ingestion's code and computes its figures with the comparison's (`recompute`, which other parts read a
card with); verify checks a card against what its records give; carry imports one as a read-only experiment."""
