"""Back up a host's BIOS flash chip with flashrom: install it if missing, read twice, compare, copy off, verify.

    pyinfra -y @lxd/node1 deploys/bios_backup.py                                  # internal programmer, on the board
    pyinfra -y my-x99-box deploys/bios_backup.py --data bios_out=/srv/backups/bios
    pyinfra -y @local deploys/bios_backup.py --data bios_programmer=dummy:emulate=W25Q128FV,image=/root/chip.bin

Host data: ``bios_programmer`` (flashrom's ``-p``, default ``internal``), ``bios_out`` (directory on the controller
for the image and its manifest, default ``backups/bios``).

The whole chip is read twice on the host and the two sha256 must match (else the run fails: an SPI glitch or a
partial read, nothing is kept); the image is copied to the controller and its sha256 checked there; the Intel Flash
Descriptor is decoded (regions, access rights, the GbE MAC) into a JSON manifest beside the image. The files are
named after the host and the image's sha256, so a second run of an unchanged chip reads it again (that is the
check), writes nothing new, and reports no change. The same code runs behind ``labwright bios backup HOST``.
See docs/bios.md; the operation is labwright.operations.bios.backup.
"""

from labwright.deploys.bios_backup import deploy_bios_backup

deploy_bios_backup()
