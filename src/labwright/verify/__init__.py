"""testinfra suites, one per deploy, shipped for users to run against their own hosts.

    labwright verify base --hosts=@lxd/lw-node1
    pytest "$(labwright verify --path base)" --hosts=@ssh/root@llm1    # the same suite, run by pytest itself

Each suite reads the values it expects from pytest options (see conftest.py), else the deploy's defaults.
"""
