"""One claim's life: admission, vendor hooks, CDI spec, status, checkpoint, recovery."""
