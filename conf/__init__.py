"""The Hydra configs (`python -m ablate --help` lists their groups), installed as `ablate.conf` so
the CLI finds them wherever the package is installed, a checkout or site-packages."""
