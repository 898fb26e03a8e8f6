"""The local backend: everything classhub does to this machine's accounts, files and processes."""
