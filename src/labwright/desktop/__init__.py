"""Desktop guests: xrdp + xorgxrdp + MATE + Firefox in an unprivileged LXC (deploys/desktop.py, `labwright desktop`)."""
