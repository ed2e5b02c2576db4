"""The one-file entry the image installs as /workspace/cowork_entry.py.

Run as `/opt/venv/bin/python3 -u /workspace/cowork_entry.py --task_dir T --phase P ...`. It puts
the adapter's folder on sys.path and runs the package copied there as `cowork_container`.
"""

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.environ.get("COWORK_ADAPTER_HOME") or "/opt/cowork-adapter")
    from cowork_container.entrypoint import main  # type: ignore[import-not-found]  # the image's copy of container/

    sys.exit(main())
