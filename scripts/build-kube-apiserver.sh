#!/usr/bin/env bash
# Builds kube-apiserver from the Go module proxy, cached at
# ~/.cache/tandem/bin/kube-apiserver-$VERSION (see scripts/build-kube.sh).
exec "$(dirname "$0")/build-kube.sh" kube-apiserver
