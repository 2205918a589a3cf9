"""ResourceSlice publishing: validate a pool against the API rules, split it into slices, and
publish only the difference (see publisher.SlicePublisher)."""
