#!/usr/bin/env bash
# Entry point of docker/standins/typesense.Dockerfile: Typesense's command line (--data-dir DIR --api-key KEY ...)
# turned into the stand-in's (--api-key KEY), listening on every interface of the container.
set -euo pipefail
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --data-dir) shift 2 ;;
    --data-dir=*) shift ;;
    *)
      args+=("$1")
      shift
      ;;
  esac
done
exec python3 /opt/standin/typesense_standin.py --host 0.0.0.0 --port 8108 "${args[@]}"
