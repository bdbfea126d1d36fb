"""Switch a guest's venv to a named engine stack (or roll it back), with the ABI check before the swap.

    pyinfra -y @lxd/tabbyapi deploys/stack.py --data stack=A --data venv=/opt/tabbyapi/.venv \
        --data service=tabbyapi --data health=http://127.0.0.1:5000/health
    pyinfra -y @lxd/tabbyapi deploys/stack.py --data stack_rollback=true --data venv=/opt/tabbyapi/.venv \
        --data service=tabbyapi

Host data: stack, venv (required), service, health or health_cmd, health_timeout (s, default 60), wheelhouse
(a directory on the target), torch (resolve with another torch), stacks_root (default /opt/labwright/stacks),
keep (default 2), base_python, installer (auto|uv|pip), create (allow a venv path that does not exist yet),
stack_rollback (swap back instead), stack_unpinned_dependencies (install what the wheels require WITHOUT the
hashed lock made here; said loudly). See docs/stacks.md. A second run with the same stack changes nothing.
"""

from labwright.deploys.stack import deploy_stack

deploy_stack()
