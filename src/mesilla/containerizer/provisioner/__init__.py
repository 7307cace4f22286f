"""The provisioner: image stores (`stores/`) and rootfs backends (`backends/`)."""
