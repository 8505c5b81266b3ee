"""The SSH gateway: remote IDEs, scp and sftp into running workloads (docs/ssh.md).

``server`` listens and authenticates, ``access`` decides who may enter which workload (and
writes the audit rows), ``sessions`` runs shells, commands and sftp inside the workload.
"""
