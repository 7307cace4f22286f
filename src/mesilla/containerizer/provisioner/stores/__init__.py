"""Image stores (`--image_providers`): docker, pulling from registries or local archives."""
