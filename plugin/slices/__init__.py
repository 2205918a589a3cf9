"""The inventory and ResourceSlice publishing: all plugins' pools (inventory.Inventory),
validated against the API rules, split into slices, and published as only the difference
(publisher.SlicePublisher)."""
