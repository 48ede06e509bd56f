"""Tenant B's learner in the cross-tenant matrix (test_isolation.py): writes a checkpoint, a result and a file
in its tenant's area, says so, and runs until it is cancelled. Standard library only (run by /usr/bin/python3)."""

from __future__ import annotations

import os
import time

for directory, name in ((os.environ["LOADMASTER_CHECKPOINT_DIR"], "ckpt.pt"),
                        (os.environ["LOADMASTER_RESULTS_DIR"], "result.txt"), (os.environ["HOME"], "secret.txt")):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(f"B's {name}: do not touch\n".encode())
print("ready", flush=True)
time.sleep(300)
