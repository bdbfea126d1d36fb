"""A throwaway browsing desktop in an unprivileged LXC: xrdp + xorgxrdp + MATE + Firefox (seed 003's runbook).

    labwright guest apply inventories/desk.py                     # the guest: unprivileged, nesting (docs/guests.md)
    LABWRIGHT_DESKTOP_PASSWORD=... pyinfra -y @lxd/desk1 deploys/desktop.py
    pyinfra -y @lxd/desk1 deploys/desktop.py --data desktop_listen=127.0.0.1 --data desktop_firefox_source=debian-esr
    labwright desktop check desk1

Host data (all optional): desktop_user (desk), desktop_port (3389), desktop_listen (lan | 127.0.0.1 | an IPv4
address of the guest), desktop_firefox_source (mozilla: Mozilla's signed apt repository pinned at 1000, the seed's
choice; debian-esr: Debian's firefox-esr, same steps otherwise), desktop_stage (all | packages: install only, for
a golden container). With `guest` data (the guest model) the deploy also refuses a privileged guest and raw
AppArmor/seccomp/LXC overrides before looking at the guest.

The password comes from $LABWRIGHT_DESKTOP_PASSWORD (hashed on this machine; the hash reaches chpasswd -e on
stdin), or is generated on the guest when the user has none, kept in /root/labwright-desktop-password-USER (0600
root) and never printed. It is never written to git or an inventory, nor put on a command line. Every refusal
(privileged or de-confined guest, unsupported release, empty password, port in use) is one line, before anything
changes. See docs/desktop.md.
"""

from labwright.deploys.desktop import deploy_desktop

deploy_desktop()
