"""The local backend: everything classhub does to this machine's accounts, processes and GPUs.

Template storage and home seeding on a file system serve the Kubernetes mode too: they are in
hub_ext.backends, which both backends stand on (docs/architecture.md, rule 2).
"""
