"""A realistic example lab: two Proxmox VE nodes, a GPU guest for tabbyAPI, a desktop guest, and an
LXD/Incus host. Copy it, change the names and addresses, and run:

    export PROXMOX_TOKEN_ID='labwright@pve!deploy'   # the LabwrightDeploy role (docs/security.md), not root@pam
    export PROXMOX_TOKEN_SECRET="$(pass show pve/labwright)"   # from your password manager
    pyinfra inventories/lab.py deploys/base.py --limit gpu_guests

Nothing secret lives here: Proxmox credentials are read from the environment by labwright when it
talks to the API (see docs/inventories.md); SSH uses your agent or ~/.ssh/config. The addresses
below are examples of a typical home LAN; labwright's tests never contact them.
"""

# Proxmox VE nodes, reached over SSH as root (`pct` runs there). Host names may be ~/.ssh/config aliases.
pve_nodes = (
    [
        ("pve1", {"ssh_hostname": "192.168.1.11", "pve_gpu": "RTX 4070 12GB"}),
        ("pve2", {"ssh_hostname": "192.168.1.12", "pve_gpu": None}),
    ],
    {
        "ssh_user": "root",
        # labwright logs in here as root (pct, pvesh): deploys/base.py keeps root's key logins, not passwords
        "sshd_permit_root_login": "prohibit-password",
        "proxmox_api_url": "https://192.168.1.11:8006",
        "proxmox_verify_tls": True,  # keep TLS verified; point proxmox_ca_file at your cluster CA instead
        "proxmox_ca_file": "/etc/labwright/pve-root-ca.pem",
    },
)

# Containers on the nodes, driven through `pct exec` on their node (@pct/NODE/VMID).
gpu_guests = (
    [
        (
            "@pct/pve1/201",
            {
                "ssh_hostname": "192.168.1.11",
                "guest": {
                    "backend": "proxmox",
                    "node": "pve1",
                    "vmid": 201,
                    "hostname": "llm1",
                    "template": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
                    "cores": 8,
                    "memory": 32768,
                    "swap": 0,
                    "rootfs": "local-lvm:64",
                    "net": {"name": "eth0", "bridge": "vmbr0", "ip": "dhcp"},
                    "unprivileged": True,
                    "features": {"nesting": True},
                    "mounts": [{"host": "/tank/models", "guest": "/models", "readonly": True}],
                    "gpu": "nvidia",
                },
                "engine": "tabbyapi",
                "stack": "C",
                "tabbyapi": {"model_dir": "/models", "model_name": "Qwen3-14B-exl3-4.0bpw", "max_seq_len": 32768,
                             "cache_size": 65536, "cache_mode": "8,4"},
            },
        ),
    ],
    {"admin_user": "labadmin", "admin_ssh_public_key_file": "~/.ssh/id_ed25519.pub", "timezone": "Europe/Berlin"},
)

desktop_guests = (
    [
        (
            "@pct/pve2/301",
            {
                "ssh_hostname": "192.168.1.12",
                "guest": {
                    "backend": "proxmox",
                    "node": "pve2",
                    "vmid": 301,
                    "hostname": "desk1",
                    "template": "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst",
                    "cores": 4,
                    "memory": 8192,
                    "rootfs": "local-lvm:32",
                    "net": {"name": "eth0", "bridge": "vmbr0", "ip": "dhcp"},
                    "unprivileged": True,
                    "features": {"nesting": True},
                    "gpu": "none",
                },
                "desktop": {"user": "browser", "xrdp_listen": "0.0.0.0", "firefox_source": "mozilla"},
            },
        ),
    ],
    {"admin_user": "labadmin", "admin_ssh_public_key_file": "~/.ssh/id_ed25519.pub", "timezone": "Europe/Berlin"},
)

# An LXD/Incus host on the LAN, added with `lxc remote add nas https://192.168.1.20:8443`.
lxd_guests = (
    [("@lxd/nas:llama1", {"engine": "llamacpp", "guest": {"backend": "lxd", "gpu": "nvidia", "cores": 6}})],
    {"admin_user": "labadmin", "admin_ssh_public_key_file": "~/.ssh/id_ed25519.pub"},
)
