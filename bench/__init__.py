"""``make bench``: drakit's performance figures, measured against the real ``drakit run``
process, real unix-socket gRPC, the fake kubelet and the embedded API server.

Entry point: ``python -m bench.run [--quick] [--only NAME ...] [--out FILE]`` (see
:mod:`bench.run`). Each figure is a :class:`bench.figures.Figure` measured by one function in
one of the topic modules (:mod:`bench.claims`, :mod:`bench.publish`, :mod:`bench.discovery`,
:mod:`bench.hotplug`, :mod:`bench.process`, :mod:`bench.pydra`).
"""
