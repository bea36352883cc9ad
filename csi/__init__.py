"""Kubernetes CSI driver: dataset, bucket and workspace volumes served through fuse_adapter."""
