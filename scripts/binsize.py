#!/usr/bin/env python3
"""Attributes an unstripped Go binary's symbol sizes to modules.

Usage: go build -trimpath -o /tmp/t ./cmd/tandem && scripts/binsize.py /tmp/t [N]
Prints the N largest groups (module or package prefix) in MB. Type
descriptors (type:T), itabs and closures are attributed to the package of
the name they carry; runtime tables without a package are "(runtime data)".
"""
import collections, re, subprocess, sys

GROUPS = [
    "k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go", "k8s.io/kube-openapi", "k8s.io/klog",
    "k8s.io/utils", "sigs.k8s.io", "github.com/nats-io/nats-server", "github.com/nats-io/nats.go",
    "github.com/nats-io", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/proto", "go.opentelemetry.io",
    "google.golang.org/grpc", "google.golang.org/protobuf", "google.golang.org/genproto",
    "github.com/gogo/protobuf", "github.com/golang/protobuf", "github.com/google/gnostic-models",
    "github.com/ardanlabs/jinja", "go.etcd.io", "github.com/tandemllm/tandem", "golang.org/x",
    "github.com/go-openapi", "github.com/emicklei", "github.com/prometheus", "gopkg.in/yaml", "go.yaml.in",
    "github.com/fxamacker/cbor", "github.com/google/gnostic",
]

def pkg_of(sym):
    s = sym
    for p in ("type:.eq.", "type:.namedata.", "type:", "go:itab.", "go:info.", "go:link.", "go:"):
        if s.startswith(p):
            s = s[len(p):]
            break
    s = s.lstrip("*[]")
    if s.startswith("map.") or s.startswith("func(") or s.startswith("struct {") or s.startswith("noalg."):
        return None
    head = re.split(r"[(\[]", s, 1)[0]
    i = head.rfind("/")
    j = s.find(".", i + 1)
    if j <= 0:
        return None
    return s[:j]

def group_of(pkg):
    if pkg is None:
        return "(runtime data)"
    for g in GROUPS:
        if pkg == g or pkg.startswith(g + "/") or pkg.startswith(g + "."):
            if g == "github.com/tandemllm/tandem":
                rest = pkg[len(g) + 1:] if len(pkg) > len(g) else ""
                return g + "/" + rest.split("/")[0]
            return g
    if "/" not in pkg.split(".")[0] and "." not in pkg.split("/")[0]:
        return "std:" + pkg.split("/")[0]
    parts = pkg.split("/")
    return "/".join(parts[:3])

def main():
    binary = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    out = subprocess.run(["go", "tool", "nm", "-size", binary], capture_output=True, text=True, check=True).stdout
    # Zero-filled sections take no room in the file.
    bss = []
    for line in subprocess.run(["readelf", "-SW", binary], capture_output=True, text=True, check=True).stdout.splitlines():
        f = line.replace("[ ", "[").split()
        if len(f) > 5 and f[1] in (".bss", ".noptrbss"):
            bss.append((int(f[3], 16), int(f[3], 16) + int(f[5], 16)))
    sizes = collections.Counter()
    total = 0
    for line in out.splitlines():
        f = line.split(None, 3)
        if len(f) < 4 or f[2] in ("U",):
            continue
        try:
            sz = int(f[1])
        except ValueError:
            continue
        addr = int(f[0], 16)
        if any(lo <= addr < hi for lo, hi in bss):
            continue
        total += sz
        sizes[group_of(pkg_of(f[3]))] += sz
    print(f"{'group':60s} {'MB':>7s}")
    for g, sz in sizes.most_common(n):
        print(f"{g:60s} {sz/1e6:7.2f}")
    print(f"{'total symbol bytes':60s} {total/1e6:7.2f}")

main()
