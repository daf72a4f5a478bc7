#!/usr/bin/env python3
"""Time to healthy and resident memory of `tandem serve` (issue 38).

Starts the command given after the port, polls http://127.0.0.1:PORT/health
every 50 ms from the process's start until it answers 200, then prints one
JSON line: healthy_s (wall seconds from start), cpu_s (the process's user +
system CPU seconds by then), VmRSS, RssAnon and RssFile (bytes, from
/proc/PID/status, once healthy), and the /health body's per-worker
memory. The process is then stopped (SIGTERM).

  scripts/native-start-rss.py 18080 tandem serve --engine native \\
      --model /tmp/qwen3-0.6b-q8_0.gguf --workers 1 --kv-events off \\
      --http-addr 127.0.0.1:18080
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request


def status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0]) * 1024
    return out


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    port, cmd = sys.argv[1], sys.argv[2:]
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    healthy, body = None, None
    try:
        while time.monotonic() - start < 300 and p.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        healthy, body = time.monotonic() - start, json.loads(r.read(1 << 20))
                        break
            except OSError:
                pass
            time.sleep(0.05)
        out = {"healthy_s": None if healthy is None else round(healthy, 3)}
        if healthy is not None:
            out["cpu_s"] = round(cpu_seconds(p.pid), 2)
            out.update(status(p.pid))
            out["memory"] = [w.get("memory") for w in body.get("workers", [])]
        print(json.dumps(out))
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


if __name__ == "__main__":
    main()
