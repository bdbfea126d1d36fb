"""Stack switch: build a named engine stack's venv beside the running one, verify it, swap a symlink, restart.

Layout on the target (``--root``, default ``/opt/labwright/stacks``)::

    <root>/<stack>-<hash>/venv         one environment per (stack, wheels, managed path); built in place
    <root>/<stack>-<hash>/stack.json   its manifest: stack name, wheels with sha256, the managed path
    <root>/state/<slug>.json           per managed path: current, previous, history (for rollback and GC)
    <venv path>  ->  <root>/<stack>-<hash>/venv   the symlink services run through, swapped atomically

Modules: ``plan`` (what to build, pure), ``layout`` (paths, state, symlink swap, GC), ``fetch`` (wheels with
hash checks), ``build`` (venv + installer), ``service`` (restart, health), ``switch`` (the sequence),
``show`` (the verifier's view of current/previous), ``remote`` (the target-side command line) and ``bundle``
(the zipapp that carries all of it to a target). Everything that runs on the target uses the standard
library, the ABI verifier (pyelftools, packaging) and, as a fallback installer, pip: ``bundle`` packs them.
"""
