"""The ``hostdev`` discoverer: the node's own device files for pods, selected by rules in the
syntax of udev rules (:mod:`.rules`), read from the device tree (:mod:`.tree`)."""
