"""Start-up and operations: the command, configuration, wiring, metrics, logs."""
