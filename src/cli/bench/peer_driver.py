"""The peer's side of `sandboxd bench --only peer`: SWE-ReX, driven from the
bench over line-delimited JSON on stdin and stdout, one request at a time.

Started as `python peer_driver.py IMAGE LABEL`; answers first with
{"ok": true, "version": "..."}, then one line per request:

  {"op": "start", "dir": null | "/path"} -> {"ok": true, "start_s": ..., "first_s": ...}
      DockerDeployment.start() on IMAGE (never pulled; `dir` bind-mounted at
      /workspace), then a first execute(`true`); the new deployment becomes
      the current one.
  {"op": "exec"} -> {"ok": true, "s": ...}   execute(`true`) in the current one
  {"op": "stop"} -> {"ok": true, "s": ...}   deployment.stop() of the current one
  {"op": "quit"} -> stops what is left and exits (so does the end of stdin)

Errors answer {"ok": false, "error": "..."}. Every time is SWE-ReX's own
await, taken with time.perf_counter(): its client-side latency. Containers
are labelled LABEL, so the bench can remove any left behind.
"""

import asyncio
import json
import os
import sys
import time
import traceback

# SWE-ReX logs at DEBUG by default; the bench keeps this process's stderr.
os.environ.setdefault("SWE_REX_LOG_STREAM_LEVEL", "WARNING")

from swerex import __version__  # noqa: E402
from swerex.deployment.docker import DockerDeployment  # noqa: E402
from swerex.runtime.abstract import Command  # noqa: E402

# Replies only on the real stdout; anything SWE-ReX prints goes to stderr.
OUT = sys.stdout
sys.stdout = sys.stderr

TRUE = Command(command="true", shell=True)


def reply(obj):
    OUT.write(json.dumps(obj) + "\n")
    OUT.flush()


class Driver:
    def __init__(self, image, label):
        self.image = image
        self.label = label
        self.current = None
        self.started = []

    async def start(self, directory):
        docker_args = ["--label", self.label]
        if directory:
            docker_args += ["-v", f"{directory}:/workspace"]
        # `swerex-remote` is installed in the image and on its PATH, so the
        # default start command runs it without pipx; no standalone Python.
        deployment = DockerDeployment(
            image=self.image,
            pull="never",
            docker_args=docker_args,
            python_standalone_dir=None,
            startup_timeout=120.0,
        )
        self.started.append(deployment)
        t = time.perf_counter()
        await deployment.start()
        start_s = time.perf_counter() - t
        t = time.perf_counter()
        response = await deployment.runtime.execute(TRUE)
        first_s = time.perf_counter() - t
        if response.exit_code != 0:
            raise RuntimeError(f"`true` exited {response.exit_code}: {response.stderr}")
        self.current = deployment
        return {"start_s": start_s, "first_s": first_s}

    async def exec(self):
        runtime = self.current.runtime
        t = time.perf_counter()
        response = await runtime.execute(TRUE)
        s = time.perf_counter() - t
        if response.exit_code != 0:
            raise RuntimeError(f"`true` exited {response.exit_code}: {response.stderr}")
        return {"s": s}

    async def stop(self):
        deployment, self.current = self.current, None
        t = time.perf_counter()
        await deployment.stop()
        s = time.perf_counter() - t
        self.started.remove(deployment)
        return {"s": s}

    async def stop_all(self):
        for deployment in self.started:
            try:
                await deployment.stop()
            except Exception:
                traceback.print_exc()
        self.started = []
        self.current = None

    async def handle(self, request):
        op = request.get("op")
        if op == "start":
            return await self.start(request.get("dir"))
        if op in ("exec", "stop") and self.current is None:
            raise RuntimeError(f"{op}: no deployment started")
        if op == "exec":
            return await self.exec()
        if op == "stop":
            return await self.stop()
        raise RuntimeError(f"unknown op {op!r}")


async def main():
    image, label = sys.argv[1], sys.argv[2]
    driver = Driver(image, label)
    reply({"ok": True, "version": __version__})
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                if request.get("op") == "quit":
                    break
                answer = await driver.handle(request)
                reply({"ok": True, **answer})
            except Exception as e:
                traceback.print_exc()
                reply({"ok": False, "error": f"{type(e).__name__}: {e}"})
    finally:
        await driver.stop_all()


if __name__ == "__main__":
    asyncio.run(main())
