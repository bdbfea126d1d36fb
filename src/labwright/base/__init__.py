"""The base every lab host gets: timezone, locale, unattended upgrades, an admin user, sshd hardening."""
