"""The build's one job beyond pyproject.toml: map the checkout's top-level data folders into the package.

``templates/`` and ``wheels_matrix/`` sit at the top of the checkout (beside ``deploys/`` and ``inventories/``) and
ship inside the wheel as the packages ``labwright.data.templates`` and ``labwright.data.matrix``; an editable
install maps the same names onto the same folders. labwright.paths reads them with importlib.resources.
"""

from setuptools import find_namespace_packages, find_packages, setup

#: package name -> the checkout folder that holds it
DATA_FOLDERS = {"labwright.data.templates": "templates", "labwright.data.matrix": "wheels_matrix"}
#: their subfolders (templates/tabbyapi, wheels_matrix/sources) named too, so that setuptools warns of none
DATA_PACKAGES = [f"{package}{'.' + sub if sub else ''}" for package, folder in DATA_FOLDERS.items()
                 for sub in ("", *find_namespace_packages(folder, exclude=["__pycache__", "*.__pycache__"]))]

setup(packages=[*find_packages("src"), *DATA_PACKAGES], package_dir={"": "src", **DATA_FOLDERS})
