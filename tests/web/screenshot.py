"""Make docs/figures/dashboard.png: a real platform with a few jobs, seen by the admin in headless Chromium.

    .venv/bin/python -m tests.web.screenshot [OUT.png] [--detail]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from selenium.webdriver.common.by import By

from tests.web.browser import chromium
from tests.web.pages import job_row, open_dashboard, visible, wait_for, wait_row_status
from tests.web.platform import running_platform

TRAIN = ("import os, time\n"
         "for step in range(1, 200):\n"
         "    print(f'rank {os.environ[\"RANK\"]} step {step} loss {2.5 / step:.4f}', flush=True)\n"
         "    time.sleep(0.5)\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path("docs/figures/dashboard.png"))
    parser.add_argument("--detail", action="store_true", help="open the running job's detail panel")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running_platform(Path(tmp)) as p, chromium() as driver:
        p.add_tenant("vision", 6)
        p.add_tenant("speech", 4)
        p.call("PATCH", "/api/v1/tenants/speech", p.admin, json={"borrow": 4})
        quick = [sys.executable, "-c", "print('done')"]
        done = p.submit("speech", name="tokenizer-eval", learners=1, resources={"gpus": 1}, command=quick)
        p.wait_status("speech", done, "COMPLETED")
        failed = p.submit("speech", name="asr-sweep-lr3", learners=1, resources={"gpus": 1},
                          command=[sys.executable, "-c", "raise SystemExit(3)"], retry={"policy": "never"})
        p.wait_status("speech", failed, "FAILED")
        running = p.submit("vision", name="resnet50-ddp", learners=2, resources={"gpus": 2, "cpus": 0.25},
                           command=[sys.executable, "-c", TRAIN], expected_duration_s=600)
        p.submit("speech", name="conformer-small", learners=1, resources={"gpus": 2, "cpus": 0.25},
                 command=[sys.executable, "-c", TRAIN], expected_duration_s=900)
        p.submit("vision", name="vit-finetune", learners=2, resources={"gpus": 2, "cpus": 0.25},
                 command=[sys.executable, "-c", TRAIN], expected_duration_s=1200)
        p.submit("speech", name="wav2vec-pretrain", learners=2, resources={"gpus": 4, "cpus": 0.25},
                 command=[sys.executable, "-c", TRAIN], expected_duration_s=3600)
        p.wait_status("vision", running, "PROCESSING")
        driver.set_window_size(1400, 1250)
        open_dashboard(driver, p.url, p.admin)
        wait_for(driver, lambda d: visible(d, "tenants-panel"))
        wait_row_status(driver, running, "PROCESSING")
        time.sleep(6)  # a few log lines and one estimate round
        if args.detail:
            job_row(driver, running).click()  # type: ignore[union-attr]
            wait_for(driver, lambda d: "step 5" in d.find_element(By.ID, "log").text)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(args.out))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
