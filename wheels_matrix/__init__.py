"""The wheels matrix: which torch, CUDA and engine wheels go together (docs/matrix.md).

Installed as the package ``labwright.data.matrix`` (setup.py maps this folder in, for a wheel and an editable
install alike); read with ``labwright.paths.packaged_matrix_dir()``; ``labwright matrix refresh`` rewrites it in a
checkout. This file only makes the folder a package.
"""
