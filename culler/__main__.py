"""``python -m culler``: run the classhub idle culler (JupyterHub starts it as a service)."""

from culler.app import main

if __name__ == "__main__":
    main()
