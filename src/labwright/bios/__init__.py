"""flashrom BIOS backups: the Intel Flash Descriptor decoder, the flashrom runner on a host, the manifest.

- :mod:`labwright.bios.ifd`: decode an image's Intel Flash Descriptor (regions, access rights, the GbE MAC).
- :mod:`labwright.bios.target`: run commands and move files on a host through pyinfra's connectors.
- :mod:`labwright.bios.flashrom`: flashrom command lines and what its output says.
- :mod:`labwright.bios.backup`: read twice, compare, copy off, verify; restore with its safety checks.
- :mod:`labwright.bios.manifest`: the JSON manifest written beside each image.
"""
