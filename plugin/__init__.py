"""drakit's node agent (imported as ``drakit.plugin``)."""

if __name__ != "drakit.plugin":  # the checkout's top-level folder, imported by its own name
    raise ImportError(f"{__name__} is a folder of the drakit checkout, not a package of its "
                      f"own (a second copy of every module): import drakit.plugin instead")
