"""The embedded API server's HTTP layer: :mod:`~.server` (the listening server and the
handler of one connection: read, route, record, faults, errors), :mod:`~.answer` (sending an
answer), :mod:`~.routes` (Kubernetes REST paths → resource, version, verb),
:mod:`~.verbs` (get, list, create, update, patch, delete, deletecollection) and
:mod:`~.watch` (the watch stream)."""
