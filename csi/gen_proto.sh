#!/usr/bin/env bash
# Generate the CSI gRPC stubs (csi/proto_gen/csi_pb2*.py) from csi/proto/csi.proto.
#   csi/gen_proto.sh [PYTHON]     (scripts/install.sh runs it with the venv's python)
# The proto is compiled as csi/proto_gen/csi.proto so the generated modules import each
# other as `csi.proto_gen.csi_pb2` (grpc_tools derives the import path from the proto path).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${1:-${PYTHON:-.venv/bin/python}}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/csi/proto_gen"
cp csi/proto/csi.proto "$work/csi/proto_gen/csi.proto"
includes=$("$PYTHON" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')
"$PYTHON" -m grpc_tools.protoc -I "$work" -I "$includes" \
  --python_out=. --pyi_out=. --grpc_python_out=. "$work/csi/proto_gen/csi.proto"
touch csi/proto_gen/__init__.py
