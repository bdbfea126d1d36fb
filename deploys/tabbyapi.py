"""tabbyAPI in a guest, end to end: driver check, packages, user, engine stack, pinned source, n-gram, config, unit.

    pyinfra -y @lxd/llm1 deploys/tabbyapi.py --data tabbyapi_model_name=Qwen3-8B-exl3-4.0bpw --data stack=A
    pyinfra -y inventories/lab.py deploys/tabbyapi.py --limit gpu_guests
    labwright verify tabbyapi --hosts=@lxd/llm1

Host data: ``stack`` (a stack of wheels_matrix/stacks.toml), ``tabbyapi_<key>`` or a ``tabbyapi`` dict for every key
of templates/tabbyapi/defaults.toml, ``guest`` (the guest's declaration, see docs/guests.md). See docs/tabbyapi.md.

Everything in the data, and everything that can be known about the host before a change (model directory, port,
driver), is checked first; each refusal is one line naming the key, and nothing changes. A broken stack is refused
by the stack switch before its swap; a ref the remote does not have, before the checkout; both leave the running
service as it was. A second run with the same data changes nothing.
"""

from labwright.deploys import engine_host
from labwright.deploys.tabbyapi import deploy_tabbyapi

if engine_host("tabbyapi"):
    deploy_tabbyapi()
