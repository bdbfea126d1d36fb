"""The build's one job beyond pyproject.toml: map the checkout's top-level data folders into the package.

``templates/`` and ``wheels_matrix/`` sit at the top of the checkout (beside ``deploys/`` and ``inventories/``) and
ship inside the wheel as the packages ``labwright.data.templates`` and ``labwright.data.matrix``; an editable
install maps the same names onto the same folders. labwright.paths reads them with importlib.resources.
"""

from setuptools import find_packages, setup

#: package name -> the checkout folder that holds it
DATA_FOLDERS = {"labwright.data.templates": "templates", "labwright.data.matrix": "wheels_matrix"}

setup(packages=[*find_packages("src"), *DATA_FOLDERS], package_dir={"": "src", **DATA_FOLDERS})
