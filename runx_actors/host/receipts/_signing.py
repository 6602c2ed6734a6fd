"""Signing identity and verification keyring (loop-host §4.5, §4.6).

There is no global signer: a :class:`Signer` is a value the caller builds (from the
environment, the demo identity or the local-development identity) and passes in.

* :func:`signer_from_env` reads ``RUNX_RECEIPT_SIGN_KID``,
  ``RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64`` and ``RUNX_RECEIPT_SIGN_ISSUER_TYPE``, which
  are required together.
* :func:`require_signer` is what governed paths (``skill``, ``resume``, ``harness``, the
  loop host) call: without an identity it raises the §4.5 error.
* :func:`demo_signer_from_env` is the demo's rule: the environment identity, else the demo
  identity.
* :func:`keyring_from_env` builds the verification keyring from
  ``RUNX_RECEIPT_VERIFY_*`` plus the key of a fully set signing identity.

An empty environment variable counts as unset.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping

import attrs
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ._c14n import bytes_hash
from ._errors import KeyringConfigError, SigningConfigError
from ._model import Issuer, IssuerType, Signature

__all__ = [
    "SIGN_KID_ENV",
    "SIGN_SEED_ENV",
    "SIGN_ISSUER_TYPE_ENV",
    "VERIFY_KID_ENV",
    "VERIFY_PUBLIC_KEY_ENV",
    "SIGNING_REQUIRED_MESSAGE",
    "DEMO_KID",
    "DEMO_SEED_BASE64",
    "LOCAL_DEVELOPMENT_KID",
    "LOCAL_DEVELOPMENT_PUBLIC_KEY_SHA256",
    "Signer",
    "Keyring",
    "signer_from_env",
    "require_signer",
    "demo_signer_from_env",
    "keyring_from_env",
    "decode_base64",
    "decode_signature_value",
    "encode_signature_value",
    "ed25519_verify",
]

SIGN_KID_ENV = "RUNX_RECEIPT_SIGN_KID"
SIGN_SEED_ENV = "RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64"
SIGN_ISSUER_TYPE_ENV = "RUNX_RECEIPT_SIGN_ISSUER_TYPE"
VERIFY_KID_ENV = "RUNX_RECEIPT_VERIFY_KID"
VERIFY_PUBLIC_KEY_ENV = "RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64"

#: The §4.5 refusal of governed paths without a signing identity (exit 1).
SIGNING_REQUIRED_MESSAGE = (
    "governed runtime receipt signing requires RUNX_RECEIPT_SIGN_KID, "
    "RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64 and RUNX_RECEIPT_SIGN_ISSUER_TYPE"
)

#: The demo identity (§4.5): 32 x ASCII ``B``, kid ``runx-demo-key``, issuer ``hosted``.
DEMO_KID = "runx-demo-key"
DEMO_SEED_BASE64 = "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI="

#: The local-development issuer (§4.5); its "hash" is a fixed label, not a key hash.
LOCAL_DEVELOPMENT_KID = "runtime-skeleton"
LOCAL_DEVELOPMENT_PUBLIC_KEY_SHA256 = "sha256:runtime-skeleton-public"

_BASE64 = re.compile(r"^[A-Za-z0-9+/_-]*={0,2}$")
_PRODUCTION_ISSUERS = (IssuerType.HOSTED, IssuerType.CI)


def decode_base64(text: str) -> bytes:
    """Decode standard base64 or base64url, padding optional (§4.5, §4.6).

    Raises:
        ValueError: *text* is not such an encoding (mixed alphabets included).
    """
    if not isinstance(text, str) or _BASE64.match(text) is None:
        raise ValueError("not base64 or base64url")
    if ("+" in text or "/" in text) and ("-" in text or "_" in text):
        raise ValueError("mixes the base64 and base64url alphabets")
    body = text.rstrip("=")
    padding = len(text) - len(body)
    if len(body) % 4 == 1 or (padding and (len(body) + padding) % 4):
        raise ValueError("base64 length is invalid")
    body = body.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not base64: {exc}") from None


#: The one accepted text of a 64-byte Ed25519 signature: 86 base64url characters, no
#: padding (§4.2, §4.4 step 4). The last character carries 2 data bits and 4 zero bits,
#: so it is one of the 16 characters whose low 4 bits are zero.
_SIGNATURE_TEXT = re.compile(r"^[A-Za-z0-9_-]{85}[AQgw]$")


def decode_signature_value(text: str) -> bytes:
    """The 64 signature bytes of a ``signature.value`` body (the text after ``base64:``).

    Exactly one encoding is accepted, the one the sealer writes: base64url without
    padding, canonical trailing bits (``encode_signature_value(decode(t)) == "base64:"
    + t``). Padded, standard-alphabet, mixed or non-canonical texts are refused, so one
    signature has one byte string and one receipt file (issue 12).

    Raises:
        ValueError: *text* is not that encoding of 64 bytes.
    """
    if not isinstance(text, str) or _SIGNATURE_TEXT.match(text) is None:
        raise ValueError("not 86 base64url characters without padding, canonical "
                         "trailing bits")
    raw = base64.urlsafe_b64decode(text + "==")
    if encode_signature_value(raw) != "base64:" + text:  # defensive; the pattern implies it
        raise ValueError("not the canonical base64url encoding")
    return raw


def encode_signature_value(signature: bytes) -> str:
    """``"base64:" + base64url_nopad(signature)`` (§4.4 step 4)."""
    return "base64:" + base64.urlsafe_b64encode(signature).rstrip(b"=").decode("ascii")


def ed25519_verify(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """True iff *signature* is a valid Ed25519 signature of *message* under the raw
    32-byte *public_key*. Raises nothing."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def _check_seed(_: object, __: attrs.Attribute[bytes | None], value: bytes | None) -> None:
    if value is not None and (not isinstance(value, bytes) or len(value) != 32):
        raise ValueError("an Ed25519 seed is exactly 32 bytes")


@attrs.frozen(kw_only=True)
class Signer:
    """A receipt signing identity (§4.5).

    ``seed`` is the 32-byte Ed25519 seed, or None for the local-development identity,
    whose signature value is ``sig:<digest>``. Build one with :meth:`from_seed`,
    :meth:`demo`, :meth:`local_development` or :func:`signer_from_env`.
    """

    kid: str = attrs.field()
    issuer_type: IssuerType
    seed: bytes | None = attrs.field(default=None, repr=False, validator=_check_seed)

    @kid.validator
    def _check_kid(self, _: attrs.Attribute[str], value: str) -> None:
        if not isinstance(value, str) or not value:
            raise ValueError("a signing kid is a non-empty string")

    @classmethod
    def from_seed(cls, kid: str, seed: bytes, issuer_type: IssuerType) -> Signer:
        """An Ed25519 identity. Raises ValueError for a seed that is not 32 bytes."""
        return cls(kid=kid, issuer_type=issuer_type, seed=seed)

    @classmethod
    def demo(cls) -> Signer:
        """The demo identity (§4.5): kid ``runx-demo-key``, seed 32 x ``B``, ``hosted``."""
        return cls(kid=DEMO_KID, issuer_type=IssuerType.HOSTED,
                   seed=decode_base64(DEMO_SEED_BASE64))

    @classmethod
    def local_development(cls) -> Signer:
        """The local-development identity (library and tests only, §4.5): issuer
        ``{local, runtime-skeleton, sha256:runtime-skeleton-public}``, value
        ``sig:<digest>``. Production verification rejects its receipts."""
        return cls(kid=LOCAL_DEVELOPMENT_KID, issuer_type=IssuerType.LOCAL, seed=None)

    @property
    def is_local_development(self) -> bool:
        """True for the ``sig:<digest>`` identity of §4.5."""
        return self.seed is None

    @property
    def public_key(self) -> bytes | None:
        """The raw 32-byte Ed25519 public key, or None for local development."""
        if self.seed is None:
            return None
        key = Ed25519PrivateKey.from_private_bytes(self.seed).public_key()
        return key.public_bytes(Encoding.Raw, PublicFormat.Raw)

    @property
    def issuer(self) -> Issuer:
        """The receipt ``issuer`` (§4.2): ``public_key_sha256 = Hb(public key)``."""
        key = self.public_key
        key_hash = LOCAL_DEVELOPMENT_PUBLIC_KEY_SHA256 if key is None else bytes_hash(key)
        return Issuer(type=self.issuer_type, kid=self.kid, public_key_sha256=key_hash)

    def sign(self, digest: str) -> Signature:
        """Sign the 71-character *digest* string (§4.4 step 4): the UTF-8 bytes of the
        text, never the raw hash bytes. Local development returns ``sig:<digest>``."""
        if self.seed is None:
            return Signature(alg="Ed25519", value="sig:" + digest)
        raw = Ed25519PrivateKey.from_private_bytes(self.seed).sign(digest.encode("utf-8"))
        return Signature(alg="Ed25519", value=encode_signature_value(raw))

    def keyring(self) -> Keyring:
        """A keyring trusting exactly this identity's key (empty for local development)."""
        key = self.public_key
        return Keyring() if key is None else Keyring.of({self.kid: key})


def _check_keys(
    _: object, __: attrs.Attribute[tuple[tuple[str, bytes], ...]],
    value: tuple[tuple[str, bytes], ...],
) -> None:
    kids = [kid for kid, _key in value]
    if len(set(kids)) != len(kids):
        raise ValueError("a keyring maps each kid to one key")
    for kid, key in value:
        if not isinstance(kid, str) or not kid or not isinstance(key, bytes) or len(key) != 32:
            raise ValueError("a keyring maps non-empty kids to raw 32-byte Ed25519 keys")


def _sorted_entries(items: Iterable[tuple[str, bytes]]) -> tuple[tuple[str, bytes], ...]:
    return tuple(sorted(items))


@attrs.frozen
class Keyring:
    """Trusted verification keys (§4.6): ``kid`` → raw 32-byte Ed25519 public key."""

    entries: tuple[tuple[str, bytes], ...] = attrs.field(
        default=(), converter=_sorted_entries, validator=_check_keys
    )

    @classmethod
    def of(cls, keys: Mapping[str, bytes]) -> Keyring:
        """A keyring from a ``{kid: public key}`` mapping. Raises ValueError on a bad key."""
        return cls(tuple(keys.items()))

    def get(self, kid: str) -> bytes | None:
        """The key trusted under *kid*, or None."""
        for entry_kid, key in self.entries:
            if entry_kid == kid:
                return key
        return None

    @property
    def kids(self) -> tuple[str, ...]:
        """The trusted kids, sorted."""
        return tuple(kid for kid, _ in self.entries)

    def merged(self, other: Iterable[tuple[str, bytes]]) -> Keyring:
        """This keyring plus *other*'s entries (the same kid twice must name one key).

        Raises:
            KeyringConfigError: a kid mapped to two different keys.
        """
        keys = dict(self.entries)
        for kid, key in other:
            if keys.get(kid, key) != key:
                raise KeyringConfigError(
                    f"kid {kid!r} is configured with two different public keys",
                    reason="conflicting_kid", kid=kid,
                )
            keys[kid] = key
        return Keyring.of(keys)


def _env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value if value else None


def signer_from_env(env: Mapping[str, str]) -> Signer | None:
    """Read the signing identity from *env* (§4.5); None when none of the three variables
    is set.

    Raises:
        SigningConfigError: only some of the variables are set (``reason="partial"``), the
            seed is not base64 of 32 bytes (``bad_seed``), or the issuer type is not
            ``hosted``/``ci`` (``bad_issuer_type``).
    """
    kid, seed_text, issuer_text = (
        _env(env, SIGN_KID_ENV), _env(env, SIGN_SEED_ENV), _env(env, SIGN_ISSUER_TYPE_ENV)
    )
    present = [v is not None for v in (kid, seed_text, issuer_text)]
    if not any(present):
        return None
    if not all(present):
        missing = [name for name, ok in zip(
            (SIGN_KID_ENV, SIGN_SEED_ENV, SIGN_ISSUER_TYPE_ENV), present) if not ok]
        raise SigningConfigError(
            f"{SIGNING_REQUIRED_MESSAGE}: {', '.join(missing)} not set",
            reason="partial", missing=tuple(missing),
        )
    assert kid is not None and seed_text is not None and issuer_text is not None
    try:
        seed = decode_base64(seed_text)
    except ValueError as exc:
        raise SigningConfigError(
            f"{SIGNING_REQUIRED_MESSAGE}: {SIGN_SEED_ENV} is not base64 ({exc})",
            reason="bad_seed",
        ) from None
    if len(seed) != 32:
        raise SigningConfigError(
            f"{SIGNING_REQUIRED_MESSAGE}: {SIGN_SEED_ENV} must decode to 32 bytes, "
            f"got {len(seed)}",
            reason="bad_seed",
        )
    if issuer_text not in (t.value for t in _PRODUCTION_ISSUERS):
        raise SigningConfigError(
            f"{SIGNING_REQUIRED_MESSAGE}: {SIGN_ISSUER_TYPE_ENV} must be hosted or ci, "
            f"got {issuer_text!r}",
            reason="bad_issuer_type",
        )
    return Signer.from_seed(kid, seed, IssuerType(issuer_text))


def require_signer(env: Mapping[str, str]) -> Signer:
    """The identity of a governed path (§4.5): ``skill``, ``resume``, ``harness`` and the
    loop host refuse to run without one.

    Raises:
        SigningConfigError: no identity (``reason="missing"``, message exactly
            :data:`SIGNING_REQUIRED_MESSAGE`) or a misconfigured one (see
            :func:`signer_from_env`).
    """
    signer = signer_from_env(env)
    if signer is None:
        raise SigningConfigError(SIGNING_REQUIRED_MESSAGE, reason="missing")
    return signer


def demo_signer_from_env(env: Mapping[str, str]) -> Signer:
    """The demo's identity (§4.5, §9.3): the environment identity if set, else
    :meth:`Signer.demo`.

    Raises:
        SigningConfigError: as :func:`signer_from_env`.
    """
    return signer_from_env(env) or Signer.demo()


def keyring_from_env(env: Mapping[str, str]) -> Keyring:
    """The verification keyring (§4.6): ``RUNX_RECEIPT_VERIFY_KID`` →
    ``RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64``, plus the key derived from a fully
    set signing identity. Both may be absent (an empty keyring).

    Raises:
        KeyringConfigError: one ``VERIFY`` variable without the other, a public key that
            is not base64 of 32 bytes, or one kid with two keys.
        SigningConfigError: the signing identity is set but misconfigured.
    """
    entries: list[tuple[str, bytes]] = []
    kid, key_text = _env(env, VERIFY_KID_ENV), _env(env, VERIFY_PUBLIC_KEY_ENV)
    if (kid is None) != (key_text is None):
        raise KeyringConfigError(
            f"{VERIFY_KID_ENV} and {VERIFY_PUBLIC_KEY_ENV} must be set together",
            reason="partial",
        )
    if kid is not None and key_text is not None:
        try:
            key = decode_base64(key_text)
        except ValueError as exc:
            raise KeyringConfigError(
                f"{VERIFY_PUBLIC_KEY_ENV} is not base64 ({exc})", reason="bad_key"
            ) from None
        if len(key) != 32:
            raise KeyringConfigError(
                f"{VERIFY_PUBLIC_KEY_ENV} must decode to 32 bytes, got {len(key)}",
                reason="bad_key",
            )
        entries.append((kid, key))
    signer = signer_from_env(env)
    if signer is not None and signer.public_key is not None:
        entries.append((signer.kid, signer.public_key))
    return Keyring().merged(entries)
