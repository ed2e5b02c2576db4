"""Docker custody: the run label, the docker shim and its BASH_ENV discovery, exact-label cleanup.

labels.py      the label keys and run_label(run_root)
shim.py        the shim program (stdlib only, run on the host by the `docker` wrapper); its concerns are the
               stdlib siblings shim_*.py (shim_config.py aside), copied beside it from bash_env.SHIM_FILES
shim_config.py the shim's typed run config (ContainerLimits, ShimConfig)
bash_env.py    install_custody(): config, wrapper and BASH_ENV script, and the runner env
docker_ops.py  docker-py: list, remove and verify by exact label; image identity; bypass check
watchdog.py    the process that fences, stops and cleans the run when its launcher dies
"""
