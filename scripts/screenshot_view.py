"""The README's picture of ``firsttoken view``: a viewer on a free port, fed by the demo's workload
through firsttoken's own OTLP set-up, its slowest call opened, shot by headless Chromium.

    .venv/bin/python scripts/screenshot_view.py [docs/img/view.png]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

from firsttoken import view


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img/view.png").resolve()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("screenshot_view: no chromium (scripts/install_chromium.sh installs Debian's)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        server = view.make_server(port=0, db=str(Path(tmp) / "view.sqlite3"))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_"))}
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=server.url, OTEL_SERVICE_NAME="support-bot")
        demo = [sys.executable, "-m", "firsttoken", "demo", "--actions", "60", "--no-levers", "--html", ""]
        subprocess.run(demo, env=env, check=True, stdout=subprocess.DEVNULL, timeout=600)
        query = "/api/overview?window=900&group=model&metric=e2e"
        with urllib.request.urlopen(server.url + query, timeout=60) as r:
            slowest = json.load(r)["slowest"][0]["span_id"]
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run(
                [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 f"--user-data-dir={profile}", "--window-size=1280,1700", "--virtual-time-budget=8000",
                 f"--screenshot={out}", f"{server.url}/#call={slowest}"],
                check=True, capture_output=True, timeout=180,
            )  # fmt: skip
        server.shutdown()
        server.server_close()
        server.store.close()
    print(f"screenshot_view: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
