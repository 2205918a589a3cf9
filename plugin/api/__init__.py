"""The API server: requests, retries, the claim and slice clients."""
