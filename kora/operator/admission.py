"""The validating admission webhook: the API server refuses an invalid resource with ``kora up``'s messages.

The CRD schemas carry types, enums, defaults and patterns, but a 1.20 API
server cannot check the models' cross-field rules (mode/config consistency, ``memory.type: remote`` needs
``memoryStore``, reserved environment names, ...). The operator serves a validating webhook that runs the
same models as ``kora up`` (:func:`kora.resources.loader.resource_problems`) and refuses with HTTP 422 and one
line per problem. References to resources that do not exist (yet) are *warnings*, not refusals: ``kubectl
apply -f`` of a folder creates resources in any order. The webhook's failure policy is ``Ignore``: while the
operator is down resources are still accepted, and the reconciler reports any problem as phase ``Failed`` with
the same message, so nothing invalid ever runs.

The webhook is served over HTTPS by kopf's webhook server with a certificate the operator makes for itself at
start (:func:`self_signed_certificate`); kopf writes the ``ValidatingWebhookConfiguration`` (named
:data:`WEBHOOK_CONFIGURATION`) with its CA bundle. In a cluster the API server reaches the operator through
its Service (:class:`ServiceWebhookServer`); outside, at the URL of the listening address.
"""

from __future__ import annotations

import datetime
import ipaddress
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Final

import kopf
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kora.resources import RESOURCE_CLASSES, ResourceRef, references_of, resource_problems

#: Name of the ValidatingWebhookConfiguration kopf keeps up to date.
WEBHOOK_CONFIGURATION: Final = "kora.dev"


def validation_messages(kind: str, body: Mapping[str, object]) -> list[str]:
    """``field.path: reason`` for every problem of ``body`` (a ``kind`` resource); ``[]`` when valid."""
    return [f"{p.path}: {p.reason}" if p.path else p.reason for p in resource_problems(dict(body) | {"kind": kind})]


def reference_warnings(kind: str, body: Mapping[str, object], exists: Callable[[ResourceRef], bool]) -> list[str]:
    """A warning per resource ``body`` names that ``exists`` does not know (the body must be valid)."""
    resource = RESOURCE_CLASSES[kind].model_validate(body)
    return [
        f"{path}: {target.kind} {target.name} does not exist in namespace {target.namespace} (yet); "
        "the resource waits for it"
        for path, target in references_of(resource)
        if not exists(target)
    ]


def self_signed_certificate(hostnames: list[str], directory: Path) -> tuple[Path, Path, bytes]:
    """Write a self-signed server certificate for ``hostnames`` (DNS names or IP addresses) and its key into
    ``directory``; returns ``(certfile, keyfile, cadata)``, the certificate being its own CA. Valid one year."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0])])
    names: list[x509.GeneralName] = []
    for hostname in hostnames:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(hostname)))
        except ValueError:
            names.append(x509.DNSName(hostname))
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    certfile, keyfile = directory / "tls.crt", directory / "tls.key"
    certfile.write_bytes(pem)
    keyfile.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    keyfile.chmod(0o600)
    return certfile, keyfile, pem


def webhook_server(*, listen: str, port: int, host: str, service: tuple[str, str] | None = None) -> kopf.WebhookServer:
    """kopf's HTTPS webhook server on ``listen:port`` with a fresh self-signed certificate for ``host``.

    ``service`` ``(namespace, name)``: the API server reaches the webhook through that Service (port ``port``);
    None: at ``https://host:port``.
    """
    directory = Path(tempfile.mkdtemp(prefix="kora-webhook-"))
    hostnames = [host, *([f"{service[1]}.{service[0]}.svc"] if service else [])]
    certfile, keyfile, cadata = self_signed_certificate(hostnames, directory)
    if service is None:
        return kopf.WebhookServer(addr=listen, port=port, host=host, certfile=certfile, pkeyfile=keyfile, cadata=cadata)
    return ServiceWebhookServer(
        service, addr=listen, port=port, host=host, certfile=certfile, pkeyfile=keyfile, cadata=cadata
    )


class ServiceWebhookServer(kopf.WebhookServer):
    """kopf's webhook server, announced to the API server as Service ``(namespace, name)`` rather than a URL."""

    def __init__(
        self,
        service: tuple[str, str],
        *,
        addr: str,
        port: int,
        host: str,
        certfile: Path,
        pkeyfile: Path,
        cadata: bytes,
    ) -> None:
        super().__init__(addr=addr, port=port, host=host, certfile=certfile, pkeyfile=pkeyfile, cadata=cadata)
        self.service = service

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        namespace, name = self.service
        async for config in super().__call__(fn):
            announced = kopf.WebhookClientConfig(
                service={"namespace": namespace, "name": name, "port": self.port, "path": self.path or ""}
            )
            if config.get("caBundle"):
                announced["caBundle"] = config["caBundle"]
            yield announced
