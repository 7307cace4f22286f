"""Provisioner errors, each naming the image, blob or path at fault and the fix.

ProvisionerError
├── ImageReferenceError   an image name that cannot be parsed
├── ImageNotFound         no such image in the registry or local directory
├── RegistryError         the registry answered with an error or not at all
│   └── RegistryAuthError  authentication failed
├── UnsupportedImage      a manifest type, media type or platform we cannot use
├── BlobDigestMismatch    a blob whose content does not match its digest
├── LayerExtractionError  a layer tarball that is unsafe or malformed
├── BackendError          a rootfs backend that cannot be used or failed
│   └── UnusableBackend   --image_provisioner_backend names an unknown backend or one
│                         this host lacks (also a ConfigurationError)
└── UnsupportedImageProviders  --image_providers names one Mesilla lacks (also a
                          ConfigurationError)
"""

from __future__ import annotations

from mesilla.common.errors import ConfigurationError, MesillaError


class ProvisionerError(MesillaError):
    """Base of every provisioning failure (the containerizer reports it as PROVISIONING)."""


class ImageReferenceError(ProvisionerError, ValueError):
    pass


class ImageNotFound(ProvisionerError):
    pass


class RegistryError(ProvisionerError):
    pass


class RegistryAuthError(RegistryError):
    pass


class UnsupportedImage(ProvisionerError):
    pass


class BlobDigestMismatch(ProvisionerError):
    pass


class LayerExtractionError(ProvisionerError):
    pass


class BackendError(ProvisionerError):
    pass


class UnusableBackend(BackendError, ConfigurationError):
    pass


class UnsupportedImageProviders(ProvisionerError, ConfigurationError):
    pass
